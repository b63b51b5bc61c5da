"""The ``plantstore`` command: the operators' commands, and nothing of Flask's.

Each command group lives in a module of its own, listed in ``COMMANDS`` with
the line ``plantstore --help`` shows for it; a group's module is imported
only when that group runs, and the app only when its command needs it
(``create_command_app``: none of the web's parts; the worker needs none, not
even Flask). So ``plantstore --help`` imports click and this module, and a
command what it uses: a new group is one line in ``COMMANDS``.

Each command prints what a script needs on stdout and explains a failure in
one line on stderr with a non-zero exit: 2 for a bad argument, 1 for
anything else (an unusable setting, an unreachable database), never a
traceback. ``plantstore web`` (``server/launch.py``) becomes gunicorn once
gunicorn's own variables are checked (2 for one it cannot use).
"""
import dataclasses
import importlib
import os
import sys

import click

from ..server.launch import refuse_unusable
from ..settings import SettingError


@dataclasses.dataclass(frozen=True)
class Listed:
    """A command group of ``plantstore``: where it is (``module:attribute``),
    its line in ``plantstore --help``, whether its counts are served at
    ``/metrics`` (see ``PlantstoreGroup.get_command``) and whether it runs in
    a Flask app (``PlantstoreGroup.resolve_command``)."""
    where: str
    short_help: str
    counted: bool = False
    in_app: bool = True

    def load(self):
        """The click command, its module imported now."""
        module, _, attribute = self.where.partition(":")
        return getattr(importlib.import_module(module), attribute)


COMMANDS = {
    "db": Listed("plantstore.cli.database:db_cli", "Database schema migrations."),
    "users": Listed("plantstore.cli.accounts:users_cli", "Create, list and delete users."),
    "tokens": Listed("plantstore.cli.accounts:tokens_cli",
                     "Issue, list and revoke bearer tokens."),
    "webhooks": Listed("plantstore.cli.webhooks:webhooks_cli",
                       'Register and manage "New Plant" webhook receivers.'),
    "deliveries": Listed("plantstore.cli.deliveries:deliveries_cli",
                         "Inspect and re-send webhook deliveries."),
    "worker": Listed("plantstore.cli.worker:worker_cli",
                     "Deliver due webhook deliveries: forever, or just once.", counted=True,
                     in_app=False),
    "keys": Listed("plantstore.cli.keys:keys_cli",
                   "Keys that encrypt webhook secrets at rest."),
    "portal": Listed("plantstore.cli.portal:portal_cli",
                     "Links into the webhook portal, and its sessions."),
    "web": Listed("plantstore.server.launch:web_cli",
                  "Run the web server (gunicorn), its variables checked first.", counted=True,
                  in_app=False),
}
"""Every ``plantstore`` command group, by name (``plantstore --help`` sorts them)."""


def register_commands(app):
    """Attach the operators' command groups to ``app.cli`` (``app.test_cli_runner``)."""
    for listed in COMMANDS.values():
        app.cli.add_command(listed.load())


def _create_command_app():
    from .. import create_command_app
    return create_command_app()


class PlantstoreGroup(click.Group):
    """The ``plantstore`` group: the groups of ``COMMANDS``, each imported when
    it runs and given the app on demand.

    Unlike Flask's ``FlaskGroup`` it adds no ``run``, ``shell``, ``routes``,
    ``--app`` or ``--debug``: the app is always ``create_command_app()``,
    configured by ``PLANTSTORE_*`` variables.
    """

    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, cmd_name):
        listed = COMMANDS.get(cmd_name)
        if listed is None:
            return None
        if not listed.counted:
            # prometheus_client writes a process's counts to a file of its pid
            # in PROMETHEUS_MULTIPROC_DIR as soon as a metric exists; a command
            # whose counts no /metrics serves keeps them in memory instead, so
            # a shared directory gets no file per command run. Before the
            # group's module (and so prometheus_client) is imported.
            os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
        return listed.load()

    def format_commands(self, ctx, formatter):
        """The commands' lines of ``--help``, from ``COMMANDS``: none imported."""
        rows = [(name, COMMANDS[name].short_help) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx):
        """Run the command, its logging set up (not for ``--help`` or
        ``--version``, which import no part of the app)."""
        from ..observability.logs import configure_process_logging
        configure_process_logging()
        return super().invoke(ctx)

    def resolve_command(self, ctx, args):
        """The command ``args`` name, and, when it runs in an app, how it gets
        it (Flask's ``ScriptInfo``: ``create_command_app``)."""
        name, command, rest = super().resolve_command(ctx, args)
        if command is not None and COMMANDS[name].in_app:
            from flask.cli import ScriptInfo
            ctx.obj = ScriptInfo(create_app=_create_command_app, set_debug_flag=False,
                                 load_dotenv_defaults=False)
        return name, command, rest


cli = click.version_option(package_name="plantstore", prog_name="plantstore")(
    PlantstoreGroup("plantstore",
                    help="Operate plantstore: database, users, tokens, webhooks, worker, "
                         "web server."))


def first_line(error):
    """The first line of an error's text (drivers add hints on further lines)."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def main():
    """Console-script entry point: run a command; every failure is one line."""
    try:
        refuse_unusable(os.environ, ["LOG_LEVEL"])  # one line, exit 2, not logging's traceback
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
    except Exception as error:
        from peewee import DatabaseError  # imported already by whatever raised one
        if not isinstance(error, DatabaseError):
            raise
        click.echo(f"Error: the database failed: {first_line(error)} "
                   "(is it reachable, and has `plantstore db upgrade` run?)", err=True)
        sys.exit(1)
    sys.exit(exit_code if isinstance(exit_code, int) else 0)
