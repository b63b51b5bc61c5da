"""One line for every operator error: a usage error of the ``plantstore``
command (exit 2), ``worker --once`` on a database without its migrations,
and every gunicorn variable of docs/operating.md's table that gunicorn
cannot use, refused before gunicorn binds; a taken port too."""
import os
import socket
import subprocess
import sys

import pytest
from playhouse.migrations import Migration

from helpers import REPO, free_port, plantstore_env, run_plantstore
from plantstore.db import MIGRATIONS_DIR


def only_line(stderr):
    """The one line ``stderr`` holds (fails on more, or on a traceback)."""
    assert "Traceback" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.parametrize("args, named", [
    (["usrs"], "No such command 'usrs'"),
    (["users", "create"], "Missing argument 'NAME'"),
    (["tokens", "revoke", "abc"], "Invalid value for 'TOKEN_ID'"),
    (["users", "create", "alice", "--admn"], "No such option '--admn'"),
    (["deliveries", "list", "--status", "lost"], "Invalid value for '--status'"),
    (["db", "upgrade", "now"], "unexpected extra argument (now)"),
])
def test_a_usage_error_of_the_command_is_one_line_and_exit_2(database_url, tmp_path, args,
                                                            named):
    result = run_plantstore(*args, env={**os.environ, **plantstore_env(database_url)},
                            cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    line = only_line(result.stderr)
    assert line.startswith("Error: ") and named in line, line


def test_worker_once_on_a_database_without_its_migrations_is_one_line(tmp_path):
    needed = sum(1 for migration in Migration.load_directory(MIGRATIONS_DIR)  # but those
                 if not getattr(migration.load(), "AFTER_ROLLOUT", False))  # it runs beside
    result = run_plantstore("worker", "--once", cwd=tmp_path, env={
        **os.environ, **plantstore_env(f"sqlite:///{tmp_path / 'new.db'}")})
    assert result.returncode == 1
    assert only_line(result.stderr) == (
        f"Error: the database lacks {needed} migrations this release needs (0001_initial "
        "first): run `plantstore db upgrade`")


def start_gunicorn(env):
    """gunicorn as the docs start it, to its end (it is expected to refuse)."""
    return subprocess.run(
        [sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.conf.py", "wsgi:app"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


def listened_on(port):
    """Whether anything accepts connections on 127.0.0.1:``port``."""
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow
@pytest.mark.parametrize("variable, value, accepts", [
    ("WEB_CONCURRENCY", "0", "a whole number from 1 to 1000"),
    ("GUNICORN_THREADS", "x", "a whole number from 1 to 1000"),
    ("GUNICORN_THREADS", "0", "a whole number from 1 to 1000"),
    ("GUNICORN_TIMEOUT", "soon", "a whole number of seconds from 0 to 86400"),
    ("GUNICORN_GRACEFUL_TIMEOUT", "-1", "a whole number of seconds from 0 to 86400"),
    ("LOG_LEVEL", "loud", "debug, info, warning, error or critical"),
    ("PORT", "99999", "a whole number from 1 to 65535"),
    ("HOST", "no-such-host.invalid", "an address or a host name of this machine"),
    ("GUNICORN_BIND", "127.0.0.1:http", "HOST:PORT with a port from 1 to 65535"),
    ("GUNICORN_WORKER_CLASS", "nope", "a gunicorn worker class (sync,"),
    ("GUNICORN_CONTROL_SOCKET", "/no/such/directory/gunicorn.ctl",
     "a path in an existing directory"),
    ("PROMETHEUS_MULTIPROC_DIR", "/proc/no-such-directory",
     "a directory this user can make and write"),
])
def test_a_gunicorn_variable_gunicorn_cannot_use_is_one_line_before_it_binds(
        tmp_path, variable, value, accepts):
    port = free_port()
    result = start_gunicorn({**os.environ, "PORT": str(port),
                             **plantstore_env(f"sqlite:///{tmp_path / 'x.db'}"),
                             variable: value})
    assert result.returncode != 0
    line = only_line(result.stderr)
    assert line.startswith(f"Error: {variable} must be {accepts}"), line
    assert line.endswith(f"not {value!r}") or value in line, line
    assert not listened_on(port)


@pytest.mark.slow
def test_a_taken_port_is_one_line_saying_how_to_choose_another(database_url):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = start_gunicorn({**os.environ, "PORT": str(port),
                                 **plantstore_env(database_url)})
    assert result.returncode != 0
    assert only_line(result.stderr) == (
        f"Error: PORT {port} on 127.0.0.1 cannot be listened on, another program listens "
        "there: stop it, or set another PORT (e.g. PORT=8001 make run)")
