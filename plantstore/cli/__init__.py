"""The ``plantstore`` command: the operators' commands, and nothing of Flask's.

``plantstore db``, ``users`` and ``tokens`` live here, the webhook groups in
``webhooks/commands/`` (``webhooks.py``, ``deliveries.py``, ``keys.py``). Each command runs in
the app's context, prints what a script needs on stdout and explains a
failure in one line on stderr with a non-zero exit: 2 for a bad argument, 1
for anything else (an unusable setting, an unreachable database), never a
traceback. ``plantstore web`` (``web_server.py``) becomes gunicorn once
gunicorn's own variables are checked (2 for one it cannot use).
"""
import os
import sys

import click
from flask import current_app
from flask.cli import AppGroup, ScriptInfo
from peewee import DatabaseError, IntegrityError

from .. import db
from ..db import clock
from ..db.models import Subscription, Token, User
from ..db.runner import UpgradeError
from ..observability.logs import configure_process_logging
from ..server.launch import refuse_unusable, web_cli
from ..settings import SettingError
from ..web.auth import ALL_SCOPES, issue_token, revoke_token
from ..webhooks.engine import queue
from .deliveries import deliveries_cli, worker_cli
from .keys import keys_cli
from .params import NEW_USER_NAME, ROW_ID, USER_NAME, days
from .portal import portal_cli
from .webhooks import webhooks_cli


def _find_user(name):
    """The user called ``name``, or a one-line error."""
    user = User.get_or_none(User.name == name)
    if user is None:
        raise click.ClickException(f"no user named {name!r}")
    return user


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
        raise click.ClickException(f"the database failed: {_first_line(error)} "
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
    db.database.execute_sql("SELECT 1").fetchone()
    click.echo("the database answers")


@db_cli.command("status")
def db_status():
    """List migrations and whether each is applied."""
    with db.database.connection_context():
        for migration in db.migration_runner().status():
            applied = migration.applied
            state = f"applied {applied:%Y-%m-%d %H:%M}" if applied else "pending"
            click.echo(f"{migration.name}  {state}")


@click.group("users", cls=AppGroup)
def users_cli():
    """Create, list and delete users."""


@users_cli.command("create")
@click.argument("name", type=NEW_USER_NAME)
@click.option("--admin", is_flag=True, help="The user sees every user's plants.")
def users_create(name, admin):
    """Create a user called NAME.

    NAME is kept in its one form (PRECIS UsernameCasePreserved, RFC 8265:
    Unicode NFC, fullwidth letters made usual) and must be written in one
    script, without spaces, e.g. alice, alice.smith or Zoë.
    """
    try:
        with db.database.atomic():
            User.create(name=name, is_admin=admin)
    except IntegrityError:
        raise click.ClickException(f"a user named {name!r} already exists") from None
    click.echo(f"created user {name}" + (" (admin)" if admin else ""))


@users_cli.command("list")
def users_list():
    """List users."""
    for user in User.select().order_by(User.name):
        click.echo(f"{user.name}\t{'admin' if user.is_admin else 'user'}")


@users_cli.command("delete")
@click.argument("name", type=USER_NAME)
def users_delete(name):
    """Delete user NAME with their tokens, plants and webhook subscriptions."""
    user = _find_user(name)
    with db.database.atomic():
        # Each subscription first, as DELETE /webhooks/{id} deletes it (its
        # row before its deliveries: the one lock order of
        # docs/webhooks-isolation.md); then the rest. delete_nullable: a
        # subscription without an owner would be an operator's.
        for subscription in Subscription.select(Subscription.id).where(
                Subscription.owner == user.id):
            queue.delete_subscription(subscription.id)
        user.delete_instance(recursive=True, delete_nullable=True)
    click.echo(f"deleted user {name}")


@click.group("tokens", cls=AppGroup)
def tokens_cli():
    """Issue, list and revoke bearer tokens."""


@tokens_cli.command("create")
@click.argument("name", type=USER_NAME)
@click.option("--expires-in", "expires_in", type=days(36500), metavar="DAYS",
              help="Days until the token expires (default: never).")
@click.option("--scope", "scopes", multiple=True, type=click.Choice(ALL_SCOPES),
              help="Grant only this scope (repeatable; default: all).")
def tokens_create(name, expires_in, scopes):
    """Issue a token for user NAME and print it (it is shown only this once)."""
    user = _find_user(name)
    with db.database.atomic():
        _, secret = issue_token(user, scopes or ALL_SCOPES, expires_in,
                                prefix=current_app.config["TOKEN_PREFIX"])
    click.echo(secret)


@tokens_cli.command("list")
@click.argument("name", type=USER_NAME, required=False)
def tokens_list(name):
    """List tokens (of user NAME, or of everybody): id, user, hint, state."""
    # Expired by the database's clock, as requests are judged (see auth.py).
    query = (Token.select(Token, User, (Token.expires_at <= clock.now()).alias("expired"))
             .join(User).order_by(Token.id))
    if name:
        query = query.where(Token.user == _find_user(name))
    for token in query:
        if token.revoked_at:
            state = f"revoked {token.revoked_at:%Y-%m-%d}"
        elif token.expired:
            state = f"expired {token.expires_at:%Y-%m-%d}"
        elif token.expires_at:
            state = f"expires {token.expires_at:%Y-%m-%d}"
        else:
            state = "active"
        click.echo(f"{token.id}\t{token.user.name}\t{token.hint}...\t{token.scopes}\t{state}")


@tokens_cli.command("revoke")
@click.argument("token_id", type=ROW_ID)
def tokens_revoke(token_id):
    """Revoke the token with id TOKEN_ID (see `tokens list`)."""
    if not revoke_token(token_id):
        raise click.ClickException(f"no active token with id {token_id}")
    click.echo(f"revoked token {token_id}")


COMMANDS = (db_cli, users_cli, tokens_cli, webhooks_cli, deliveries_cli, worker_cli,
            keys_cli, web_cli, portal_cli)


def register_commands(app):
    """Attach the operators' command groups to ``app.cli`` (``app.test_cli_runner``)."""
    for group in COMMANDS:
        app.cli.add_command(group)


def _create_app():
    from .. import create_app
    return create_app()


class PlantstoreGroup(click.Group):
    """The ``plantstore`` group: its own commands, each given the app on demand.

    Unlike Flask's ``FlaskGroup`` it adds no ``run``, ``shell``, ``routes``,
    ``--app`` or ``--debug``: the app is always ``create_app()``, configured
    by ``PLANTSTORE_*`` variables.
    """

    def make_context(self, info_name, args, parent=None, **extra):
        extra.setdefault("obj", ScriptInfo(create_app=_create_app, set_debug_flag=False,
                                           load_dotenv_defaults=False))
        return super().make_context(info_name, args, parent, **extra)


cli = click.version_option(package_name="plantstore", prog_name="plantstore")(
    PlantstoreGroup("plantstore", commands=COMMANDS,
                    help="Operate plantstore: database, users, tokens, webhooks, worker, "
                         "web server."))


def _first_line(error):
    """The first line of an error's text (drivers add hints on further lines)."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def main():
    """Console-script entry point: run a command; every failure is one line."""
    try:
        refuse_unusable(os.environ, ["LOG_LEVEL"])  # one line, exit 2, not logging's traceback
        configure_process_logging()
        exit_code = cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted!", err=True)
        sys.exit(1)
    except click.exceptions.NoArgsIsHelpError as error:  # a group alone: its help
        error.show()
        sys.exit(error.exit_code)
    except click.UsageError as error:  # one line, without click's Usage and Try lines
        message = " ".join(error.format_message().splitlines())
        click.echo(f"Error: {message}", err=True)
        sys.exit(error.exit_code)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except SettingError as error:
        click.echo(f"Error: {error}", err=True)
        sys.exit(1)
    except DatabaseError as error:
        click.echo(f"Error: the database failed: {_first_line(error)} "
                   "(is it reachable, and has `plantstore db upgrade` run?)", err=True)
        sys.exit(1)
    sys.exit(exit_code if isinstance(exit_code, int) else 0)
