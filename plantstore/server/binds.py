"""Where gunicorn will listen, and whether it can: checked before it binds.

gunicorn's addresses are its ``--bind`` arguments (the command line's, else
``GUNICORN_CMD_ARGS``'s), else ``config/gunicorn.conf.py``'s: ``GUNICORN_BIND``,
else ``HOST``:``PORT`` (``default_bind``, an IPv6 host in brackets). Each is
read as gunicorn reads it (``gunicorn.util.parse_address``) and tried as
gunicorn will use it: a TCP address bound and let go at once, a unix
socket's path made and removed, an inherited ``fd://N`` looked at. One
gunicorn cannot listen on is a ``SettingError`` naming the argument or
variable, instead of gunicorn's traceback or its five seconds of retries.
"""
import collections
import errno
import os
import shlex
import socket
import stat

from gunicorn.util import is_ipv6, parse_address

from ..settings import SettingError

Bind = collections.namedtuple("Bind", "address named change")
"""One address gunicorn is to listen on, how an error line names it (``--bind
ADDR``, ``GUNICORN_BIND ADDR``, ``PORT 8000 on 127.0.0.1``), and what to change."""


def default_bind(environ):
    """``config/gunicorn.conf.py``'s ``bind``: ``GUNICORN_BIND``, else
    ``HOST:PORT`` (``[HOST]:PORT`` for an IPv6 host, as gunicorn reads it)."""
    bind = environ.get("GUNICORN_BIND")
    if bind:
        return bind
    host, port = environ.get("HOST", "127.0.0.1"), environ.get("PORT", "8000")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def requested(argv, environ):
    """The ``Bind`` of each address gunicorn, started with ``argv`` (its
    arguments), will listen on."""
    from gunicorn.config import Config  # gunicorn reads WEB_CONCURRENCY as it is imported
    parser = Config().parser()
    for source, args in (("--bind", argv),
                         ("--bind of GUNICORN_CMD_ARGS",
                          shlex.split(environ.get("GUNICORN_CMD_ARGS", "")))):
        given = parser.parse_args(args).bind
        if given:
            return [Bind(bind, f"{source} {bind}", f"pass another {source}")
                    for bind in given]
    if environ.get("GUNICORN_BIND"):
        bind = environ["GUNICORN_BIND"]
        return [Bind(bind, f"GUNICORN_BIND {bind}", "set another GUNICORN_BIND")]
    host, port = environ.get("HOST", "127.0.0.1"), environ.get("PORT", "8000")
    return [Bind(default_bind(environ), f"PORT {port} on {host}",
                 "set another PORT (e.g. PORT=8001 make run)")]


def check_listenable(bind):
    """``SettingError`` naming ``bind`` (a ``Bind``) when gunicorn could not
    listen there, saying why and what to change."""
    try:
        address = parse_address(bind.address)
    except RuntimeError as error:
        problem = (f"gunicorn cannot read it ({error} An IPv6 address goes in brackets: "
                   "[::1]:8000)", None)
    else:
        if isinstance(address, int):
            problem = _inherited_socket_problem(address)
        elif isinstance(address, str):
            problem = _unix_socket_problem(address)
        else:
            problem = _tcp_problem(*address)
    if problem:
        why, fix = problem
        raise SettingError(f"{bind.named} cannot be listened on, {why}: "
                           f"{fix + ', or ' if fix else ''}{bind.change}")


# Each ``_..._problem``: None, or why gunicorn could not listen there and what
# would fix it (None: only another address would).

def _tcp_problem(host, port):
    family = socket.AF_INET6 if is_ipv6(host) else socket.AF_INET  # as gunicorn binds
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except socket.gaierror:
            return f"{host!r} is no address of this machine", None
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return "another program listens there", "stop it"
            return error.strerror, None
    return None


def _unix_socket_problem(path):
    if path.startswith("\0"):  # an abstract socket: no file
        return None
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return _unmakeable(path)
    if not stat.S_ISSOCK(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "a file"
        return f"{path} is {kind}, not a socket", "remove it"
    with socket.socket(socket.AF_UNIX) as probe:
        if probe.connect_ex(path) == 0:
            return "another program listens there", "stop it"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.access(folder, os.W_OK | os.X_OK):  # gunicorn removes the stale socket first
        return f"its folder {folder} is not writable by this user", None
    return None


def _unmakeable(path):
    """Why a socket cannot be made at ``path`` (which does not exist), or None."""
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.bind(path)
        except OSError as error:
            return f"{error.strerror} ({os.path.dirname(os.path.abspath(path))})", None
    os.unlink(path)
    return None


def _inherited_socket_problem(fd):
    fix = f"start gunicorn with a listening socket as file descriptor {fd}"
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return f"file descriptor {fd} is not open", fix
    if not stat.S_ISSOCK(mode):
        return f"file descriptor {fd} is not a socket", fix
    with socket.socket(fileno=os.dup(fd)) as inherited:
        if inherited.type != socket.SOCK_STREAM:
            return f"file descriptor {fd} is not a stream socket", fix
    return None
