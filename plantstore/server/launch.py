"""``plantstore web``: the web server, gunicorn's own variables checked first.

- ``SERVER_VARIABLES`` and ``check_server_variables``: the variables of
  docs/operating.md's gunicorn table and what each accepts; also used by
  ``config/gunicorn.conf.py`` (through ``plantstore.server.gunicorn``). Nothing here
  imports ``gunicorn.config``, which reads ``WEB_CONCURRENCY`` with ``int()``
  as it is imported, before any configuration file: an unusable value would
  end in gunicorn's traceback, not in this module's one line.
- ``web_cli``: the command that checks them, then becomes gunicorn with
  ``config/gunicorn.conf.py`` and ``wsgi:app``.
"""
import os
import socket
import sys
import sysconfig
from pathlib import Path

import click

from ..observability import metrics_dir
from ..settings import SettingError


def _whole_number(minimum, maximum, unit=""):
    """A check of a whole number of ``unit`` from ``minimum`` to ``maximum``."""
    def check(raw):
        if not (raw.isascii() and raw.isdigit() and minimum <= int(raw) <= maximum):
            return f"must be a whole number{unit} from {minimum} to {maximum}"
    return check


def _log_level(raw):
    if raw.lower() not in ("debug", "info", "warning", "error", "critical"):
        return "must be debug, info, warning, error or critical"


def _worker_class(raw):
    # gunicorn.util and the worker modules import no gunicorn.config (a
    # module.Class of the operator's might): WEB_CONCURRENCY is checked before.
    from gunicorn import util
    from gunicorn.workers import SUPPORTED_WORKERS
    try:
        util.load_class(raw, default="gthread", section="gunicorn.workers")
    except Exception:  # gunicorn's own error is a traceback in a RuntimeError
        return (f"must be a gunicorn worker class ({', '.join(SUPPORTED_WORKERS)}; all "
                "but sync and gthread need their package installed) or a module.Class")


def _host(raw):
    try:
        socket.getaddrinfo(raw, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return "must be an address or a host name of this machine, e.g. 127.0.0.1 or 0.0.0.0"


def _bind(raw):
    # gunicorn.util imports no gunicorn.config; binds.py tries the address itself
    from gunicorn.util import parse_address
    try:
        address = parse_address(raw)
    except RuntimeError:
        address = None
    if isinstance(address, str):
        return _socket_path(address)
    if isinstance(address, int):
        return None
    if address is None or not 1 <= address[1] <= 65535:
        return ("must be HOST:PORT with a port from 1 to 65535 ([HOST]:PORT for an IPv6 "
                "address), unix:PATH or fd://N")
    return address[0] and _host(address[0])


def _socket_path(raw):
    if not os.path.isdir(os.path.dirname(os.path.abspath(raw))):
        return "must be a path in an existing directory"


SERVER_VARIABLES = {
    "HOST": _host,
    "PORT": _whole_number(1, 65535),
    "GUNICORN_BIND": _bind,
    "WEB_CONCURRENCY": _whole_number(1, 1000),  # before the worker class (see _worker_class)
    "GUNICORN_WORKER_CLASS": _worker_class,
    "GUNICORN_THREADS": _whole_number(1, 1000),
    "GUNICORN_TIMEOUT": _whole_number(0, 86400, " of seconds"),
    "GUNICORN_GRACEFUL_TIMEOUT": _whole_number(0, 86400, " of seconds"),
    "LOG_LEVEL": _log_level,
    "GUNICORN_CONTROL_SOCKET": _socket_path,
    metrics_dir.VARIABLE: metrics_dir.problem,  # made, as config/gunicorn.conf.py does
}
"""The variables of docs/operating.md's gunicorn table that config/gunicorn.conf.py
(and gunicorn itself: ``WEB_CONCURRENCY``) reads, each with a check that says
what it accepts (None when it is fine). ``PROMETHEUS_MULTIPROC_DIR`` is made
(config/gunicorn.conf.py makes it too, before any import, and ``metrics``
as it is imported: every process that writes metrics needs it)."""

OFF_WHEN_EMPTY = ("GUNICORN_BIND", "GUNICORN_CONTROL_SOCKET", "PROMETHEUS_MULTIPROC_DIR")
"""Those of them an empty value leaves unset."""

USAGE_EXIT_STATUS = metrics_dir.USAGE_EXIT_STATUS
"""The exit status of a server variable gunicorn cannot use, as of a bad
argument: they are the server's options, given through the environment."""


def check_server_variables(environ, names=tuple(SERVER_VARIABLES)):
    """``SettingError`` naming the first of ``names`` (``SERVER_VARIABLES``) set
    to a value gunicorn cannot use, and what it accepts."""
    for name in names:
        raw = environ.get(name)
        if raw is None or (raw == "" and name in OFF_WHEN_EMPTY):
            continue
        problem = SERVER_VARIABLES[name](raw)
        if problem:
            raise SettingError(f"{name} {problem}, not {raw!r}")


def refuse_unusable(environ, names=tuple(SERVER_VARIABLES)):
    """``check_server_variables``, its refusal a ``ServerVariableError`` (one
    line, exit status 2, from the ``plantstore`` command)."""
    try:
        check_server_variables(environ, names)
    except SettingError as error:
        raise ServerVariableError(str(error)) from None


def exit_if_unusable(environ, names):
    """``check_server_variables`` where nothing would catch its refusal (a
    configuration file, an import): its line on stderr, exit status 2."""
    try:
        check_server_variables(environ, names)
    except SettingError as error:
        print(f"Error: {error}", file=sys.stderr)
        sys.exit(USAGE_EXIT_STATUS)


CONFIG = Path("config", "gunicorn.conf.py")
"""gunicorn's configuration, in the working directory (the repository, or
/opt/plantstore of the systemd unit and the container image), as ``wsgi.py``."""

APP = "wsgi:app"


class ServerVariableError(click.ClickException):
    """One line naming the variable, exit status 2."""

    exit_code = USAGE_EXIT_STATUS


def names_a_config(args):
    """Whether gunicorn's arguments ``args`` name a configuration file
    (``-c``, ``--config``, argparse's abbreviations of it, with or without ``=``)."""
    for arg in args:
        if arg == "--":
            return False
        option = arg.split("=", 1)[0]
        if option.startswith("--conf") and "--config".startswith(option):
            return True
        if arg.startswith("-c"):
            return True
    return False


def gunicorn_command(args, cwd):
    """gunicorn's command line: ``--config`` ``cwd``/config/gunicorn.conf.py
    unless ``args`` name one, then ``args``, then ``wsgi:app``."""
    if not names_a_config(args):
        config = Path(cwd, CONFIG)
        if not config.is_file():
            raise click.UsageError(
                f"no {CONFIG} in {cwd}: run `plantstore web` in plantstore's directory "
                "(the repository, or /opt/plantstore), or pass --config PATH")
        args = ["--config", str(config), *args]
    return [*args, APP]


def gunicorn_program():
    """gunicorn's console script beside this Python's (a virtualenv's ``bin``),
    else ``gunicorn`` on ``PATH``."""
    script = Path(sysconfig.get_path("scripts"), "gunicorn")
    return str(script) if script.is_file() else "gunicorn"


@click.command("web", short_help="Run the web server (gunicorn), its variables checked first.",
               context_settings={"ignore_unknown_options": True,
                                 "allow_interspersed_args": False})
@click.argument("gunicorn_args", nargs=-1, type=click.UNPROCESSED,
                metavar="[GUNICORN OPTIONS]...")
def web_cli(gunicorn_args):
    """Run the web server: gunicorn with config/gunicorn.conf.py serving wsgi:app.

    Run it in plantstore's directory (where wsgi.py and config/ are). The
    variables of docs/operating.md's gunicorn table (HOST, PORT,
    WEB_CONCURRENCY, GUNICORN_*, LOG_LEVEL, PROMETHEUS_MULTIPROC_DIR) are
    checked first: one the server cannot use is one line naming it, exit
    status 2. Further arguments go to
    gunicorn (`plantstore web -- --help` lists its options); a --config of
    your own replaces config/gunicorn.conf.py.

    \f
    This process becomes gunicorn (exec), rather than running it inside: the
    process the caller started (systemd's main process, the container's PID
    1, honcho's child) is gunicorn's master itself, so stop and reload
    signals reach it with nothing between to forward them, and the exit
    status is the server's own. gunicorn starts in a fresh interpreter too,
    with none of this command's imports and logging (prometheus_client fixes
    where it keeps metrics when first imported, before config/gunicorn.conf.py
    sets PROMETHEUS_MULTIPROC_DIR), and its USR2 upgrade re-executes its own
    command line. By its console script: `python -m gunicorn` cannot re-exec
    itself on USR2.
    """
    refuse_unusable(os.environ)
    program = gunicorn_program()
    argv = [program, *gunicorn_command(gunicorn_args, os.getcwd())]
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(program, argv)
    except OSError as error:
        raise click.ClickException(f"gunicorn could not be started: {error.strerror} "
                                   f"({program}): is plantstore installed with it?") from None
