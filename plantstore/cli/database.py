"""``plantstore db``: apply migrations, check the database, list migrations."""
import click
from flask.cli import AppGroup
from peewee import DatabaseError

from .. import db
from ..db.runner import UpgradeError
from . import first_line


@click.group("db", cls=AppGroup)
def db_cli():
    """Database schema migrations."""


@db_cli.command("upgrade")
@click.option("--expand", is_flag=True,
              help="Apply pending migrations only up to the first that needs every node "
                   "on this release (the first step of a rolling upgrade).")
def db_upgrade(expand):
    """Apply every pending migration (with --expand: those the release before
    can run beside).

    One upgrade of a database runs at a time: another waits for it, and says
    so. A migration kept from its locks says what holds them on stderr.
    """
    try:
        upgraded = db.upgrade(expand=expand, say=lambda line: click.echo(line, err=True))
    except UpgradeError as error:
        raise click.ClickException(str(error)) from None
    except DatabaseError as error:  # not the command's hint that the upgrade has not run
        raise click.ClickException(f"the database failed: {first_line(error)} "
                                   "(is it reachable?)") from None
    lines = [f"applied {name}{_gave_way(times)}" for name, times in upgraded.applied]
    if upgraded.left:
        lines.append(f"left for after the rollout: {', '.join(upgraded.left)} (run "
                     "`plantstore db upgrade` once every node runs this release)")
    click.echo("\n".join(lines) or "up to date")


def _gave_way(times):
    """What ``db upgrade`` adds to a migration that gave way to the service."""
    if not times:
        return ""
    return f" (gave way to the service {times} time{'s' if times > 1 else ''})"


@db_cli.command("check")
def db_check():
    """Exit 0 if the database answers a query, 1 (saying why) if not."""
    db.answers()
    click.echo("the database answers")


@db_cli.command("status")
def db_status():
    """List migrations and whether each is applied."""
    with db.database.connection_context():
        for migration in db.migration_runner().status():
            applied = migration.applied
            state = f"applied {applied:%Y-%m-%d %H:%M}" if applied else "pending"
            click.echo(f"{migration.name}  {state}")
