"""gunicorn's addresses checked for what gunicorn will do with them, by
``plantstore web`` for real: each is served, or refused in one line naming
the setting or argument, exit status 2, before gunicorn starts (none of its
retries), and with no metrics folder left behind."""
import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest
import requests

from helpers import PLANTSTORE, REPO, free_port, plantstore_env, run_plantstore
from plugins.read_only import as_another_user, read_only
from plugins.servers import wait_until_up


@pytest.fixture
def web_env(tmp_path, database_url):
    """The environment of a one-worker server on the test's database, its
    temporary folder (where it would make its metrics folder) ``tmp_path/scratch``."""
    (tmp_path / "scratch").mkdir()
    env = {**os.environ, **plantstore_env(database_url), "WEB_CONCURRENCY": "1",
           "TMPDIR": str(tmp_path / "scratch"), "PORT": str(free_port())}
    for name in ("PROMETHEUS_MULTIPROC_DIR", "GUNICORN_BIND", "HOST", "GUNICORN_CMD_ARGS"):
        env.pop(name, None)
    assert run_plantstore("db", "upgrade", env=env).returncode == 0
    return env


def serves(argv, env, url, pass_fds=()):
    """Whether ``argv`` (a web server) answers ``url``/healthz with 200; stopped after."""
    server = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, pass_fds=pass_fds,
                              start_new_session=True)
    try:
        if not pass_fds:  # else connections wait in the socket's queue until gunicorn accepts
            wait_until_up(f"{url}/healthz", server)
        return requests.get(f"{url}/healthz", timeout=30).status_code == 200
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)


def refusal(argv, env):
    """The one line a web server refused with (exit status 2, nothing on stdout)."""
    result = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=60)
    assert "Traceback" not in result.stderr, result.stderr
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    [line] = result.stderr.splitlines()  # none of gunicorn's retries
    assert list(Path(env["TMPDIR"]).iterdir()) == []  # no metrics folder left behind
    return line


@pytest.fixture
def taken_port():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


@pytest.mark.slow
def test_web_bind_is_checked_against_its_address_not_host_and_port(web_env, taken_port):
    port = free_port()
    assert serves([PLANTSTORE, "web", "--bind", f"127.0.0.1:{port}"],
                  {**web_env, "PORT": str(taken_port)}, f"http://127.0.0.1:{port}")


@pytest.mark.slow
def test_web_bind_to_a_taken_address_is_one_line_naming_the_argument(web_env, taken_port):
    line = refusal([PLANTSTORE, "web", "-b", f"127.0.0.1:{taken_port}"], web_env)
    assert line == (f"Error: --bind 127.0.0.1:{taken_port} cannot be listened on, another "
                    "program listens there: stop it, or pass another --bind")


@pytest.mark.slow
@pytest.mark.parametrize("host", ["::", "::1"])
def test_an_ipv6_host_is_served(web_env, host):
    assert serves([PLANTSTORE, "web"], {**web_env, "HOST": host},
                  f"http://[::1]:{web_env['PORT']}")


@pytest.mark.slow
def test_an_inherited_listening_socket_is_served(web_env):
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        fd = listening.fileno()
        assert serves([PLANTSTORE, "web"], {**web_env, "GUNICORN_BIND": f"fd://{fd}"},
                      f"http://127.0.0.1:{listening.getsockname()[1]}", pass_fds=[fd])


@pytest.mark.slow
def test_a_file_descriptor_that_is_not_open_is_one_line(web_env):
    assert refusal([PLANTSTORE, "web"], {**web_env, "GUNICORN_BIND": "fd://99"}) == (
        "Error: GUNICORN_BIND fd://99 cannot be listened on, file descriptor 99 is not "
        "open: start gunicorn with a listening socket as file descriptor 99, or set "
        "another GUNICORN_BIND")


@pytest.mark.slow
def test_a_unix_socket_path_holding_a_regular_file_is_one_line(web_env, tmp_path):
    (tmp_path / "plantstore.sock").write_text("not a socket")
    bind = f"unix:{tmp_path / 'plantstore.sock'}"
    assert refusal([PLANTSTORE, "web"], {**web_env, "GUNICORN_BIND": bind}) == (
        f"Error: GUNICORN_BIND {bind} cannot be listened on, {tmp_path / 'plantstore.sock'} "
        "is a file, not a socket: remove it, or set another GUNICORN_BIND")
    assert (tmp_path / "plantstore.sock").read_text() == "not a socket"


@pytest.mark.slow
def test_a_unix_socket_another_program_listens_on_is_one_line(web_env, tmp_path):
    path = str(tmp_path / "plantstore.sock")
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(path)
        listening.listen()
        line = refusal([PLANTSTORE, "web"], {**web_env, "GUNICORN_BIND": f"unix:{path}"})
    assert line.endswith("another program listens there: stop it, or set another "
                         "GUNICORN_BIND"), line


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["read-only", "another user's"])
def test_a_unix_socket_in_a_folder_that_cannot_hold_it_is_one_line(web_env, tmp_path, kind):
    folder = tmp_path / "run"
    folder.mkdir()
    argv = [PLANTSTORE, "web"]
    if kind == "read-only":
        argv = read_only([folder], argv)
    else:
        os.chown(folder, 1234, 1234)
        argv = as_another_user(argv)
    bind = f"unix:{folder / 'plantstore.sock'}"
    line = refusal(argv, {**web_env, "GUNICORN_BIND": bind})
    assert line == (f"Error: GUNICORN_BIND {bind} cannot be listened on, "
                    f"{'Read-only file system' if kind == 'read-only' else 'Permission denied'}"
                    f" ({folder}): set another GUNICORN_BIND")
