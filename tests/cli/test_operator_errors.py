"""One line for every operator error: a usage error of the ``plantstore``
command (exit 2), ``worker --once`` on a database without its migrations,
and every gunicorn variable of docs/operating.md's table that gunicorn
cannot use, refused by ``plantstore web`` (the one command that starts the
web server) before anything binds, exit 2; a taken port too. And that
``plantstore web`` serves, and is what every place starting the server runs."""
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from click.testing import CliRunner
from playhouse.migrations import Migration

from helpers import (
    PLANTSTORE,
    REPO,
    free_port,
    plantstore_env,
    process_group_killed_after,
    run_plantstore,
)
from plantstore.cli import cli
from plantstore.db import MIGRATIONS_DIR
from plantstore.server import launch as web_server
from plugins.servers import wait_until_up


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


WEB = [str(PLANTSTORE), "web"]
"""The web server as the docs, config/Procfile and the systemd unit start it."""
IMAGE_WEB = ["sh", str(REPO / "config" / "container" / "entrypoint"), "web"]
"""The container image's ``web`` (its entry point, here with this virtualenv on PATH)."""
GUNICORN = [str(Path(sys.executable).with_name("gunicorn")), "-c", "config/gunicorn.conf.py",
            "wsgi:app"]
"""gunicorn started by hand with the project's configuration."""


def start_gunicorn(env, command=WEB):
    """The web server, to its end (it is expected to refuse)."""
    env = {**env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"}
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=60)


def listened_on(port):
    """Whether anything accepts connections on 127.0.0.1:``port``."""
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow
@pytest.mark.parametrize("variable, value, accepts", [
    ("WEB_CONCURRENCY", "abc", "a whole number from 1 to 1000"),
    ("WEB_CONCURRENCY", "-1", "a whole number from 1 to 1000"),
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
    assert result.returncode == 2, result.stderr
    line = only_line(result.stderr)
    assert line.startswith(f"Error: {variable} must be {accepts}"), line
    assert line.endswith(f"not {value!r}") or value in line, line
    assert result.stdout == ""
    assert not listened_on(port)


@pytest.mark.slow
@pytest.mark.parametrize("command, variable, value", [
    (IMAGE_WEB, "WEB_CONCURRENCY", "abc"),
    (IMAGE_WEB, "GUNICORN_THREADS", "x"),
    (IMAGE_WEB, "PROMETHEUS_MULTIPROC_DIR", "/proc/no-such-directory"),
    # By hand, all but WEB_CONCURRENCY: gunicorn reads it before any configuration file.
    (GUNICORN, "GUNICORN_THREADS", "x"),
    (GUNICORN, "PROMETHEUS_MULTIPROC_DIR", "/proc/no-such-directory"),
], ids=["image-web-WEB_CONCURRENCY", "image-web-GUNICORN_THREADS",
        "image-web-PROMETHEUS_MULTIPROC_DIR", "gunicorn-GUNICORN_THREADS",
        "gunicorn-PROMETHEUS_MULTIPROC_DIR"])
def test_the_images_web_and_gunicorn_by_hand_refuse_the_same_in_one_line(
        tmp_path, command, variable, value):
    port = free_port()
    result = start_gunicorn({**os.environ, "PORT": str(port),
                             **plantstore_env(f"sqlite:///{tmp_path / 'x.db'}"),
                             variable: value}, command)
    assert result.returncode == 2, result.stderr
    assert only_line(result.stderr).startswith(f"Error: {variable} must be "), result.stderr
    assert not listened_on(port)


@pytest.mark.slow
@pytest.mark.parametrize("refusal", [{"GUNICORN_THREADS": "0"},
                                     {"PLANTSTORE_DATABASE_URL": "bogus://x"}],
                         ids=["server-variable", "plantstore-setting"])
def test_a_refused_start_leaves_no_metrics_directory_behind(tmp_path, refusal):
    scratch = tmp_path / "tmp"  # where the server makes its metrics directory
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch),
           **plantstore_env(f"sqlite:///{tmp_path / 'x.db'}"), **refusal}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    result = start_gunicorn(env, GUNICORN)
    assert result.returncode in (1, 2), result.stderr
    assert only_line(result.stderr).startswith("Error: "), result.stderr
    assert list(scratch.iterdir()) == []


@pytest.mark.slow
def test_plantstore_web_serves_and_a_sigterm_ends_it_with_status_0(tmp_path):
    """The process started is gunicorn's master (no process in between): it
    answers /healthz, and SIGTERM sent to it stops the server, exit 0."""
    port = free_port()
    env = {**os.environ, **plantstore_env(f"sqlite:///{tmp_path / 'web.db'}"),
           "PORT": str(port), "WEB_CONCURRENCY": "1", "PLANTSTORE_LOG_FORMAT": "json"}
    env.pop("GUNICORN_BIND", None)
    upgraded = run_plantstore("db", "upgrade", env=env)
    assert upgraded.returncode == 0, upgraded.stderr
    log = tmp_path / "web.log"
    with log.open("wb") as output:
        server = subprocess.Popen(WEB, cwd=REPO, env=env, stdout=output,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    with process_group_killed_after(server):
        wait_until_up(f"http://127.0.0.1:{port}/healthz", server)
        answer = requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
        assert answer.status_code == 200, answer.text
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0, log.read_text()
    lines = [json.loads(line) for line in log.read_text().splitlines()
             if line.startswith("{")]
    [listening] = [line for line in lines if line["message"].startswith("Listening at")]
    assert listening["pid"] == server.pid, listening
    assert "Traceback" not in log.read_text()
    assert not listened_on(port)


@pytest.mark.parametrize("command, variable, value, accepts", [
    (("db", "check"), "LOG_LEVEL", "loud", "debug, info, warning, error or critical"),
    # Only the commands whose counts /metrics serves write metric files.
    (("worker", "--once"), "PROMETHEUS_MULTIPROC_DIR", "/proc/no-such-directory",
     "a directory this user can make and write"),
])
def test_the_server_variables_a_command_reads_are_one_line(
        tmp_path, command, variable, value, accepts):
    """Log lines and metrics are set up before the command runs (as the
    metrics module is imported, for the metrics): an unusable one is refused
    there, exit 2, not in logging's or prometheus_client's traceback."""
    result = run_plantstore(*command, cwd=tmp_path, env={
        **os.environ, **plantstore_env(f"sqlite:///{tmp_path / 'x.db'}"), variable: value})
    assert result.returncode == 2, result.stderr
    assert only_line(result.stderr).startswith(f"Error: {variable} must be {accepts}")


def test_the_web_command_reads_no_gunicorn_setting_before_its_checks():
    """gunicorn reads WEB_CONCURRENCY with int() as ``gunicorn.config`` is
    imported: the command, up to its checks, must not import it."""
    probe = ("import sys, plantstore.cli, plantstore.server.launch as w; "
             "w.check_server_variables({'GUNICORN_WORKER_CLASS': 'gthread'}); "
             "print('gunicorn.config' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                            text=True, timeout=60, env={**os.environ, "WEB_CONCURRENCY": "abc"})
    assert (result.returncode, result.stdout) == (0, "False\n"), result.stderr


def execed(monkeypatch, *args, cwd=REPO):
    """The program and arguments ``plantstore web ARGS`` would exec, in ``cwd``."""
    monkeypatch.chdir(cwd)
    for name in web_server.SERVER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    calls = []

    def execvp(program, argv):
        calls.append((program, argv))
        raise SystemExit(0)
    monkeypatch.setattr(web_server.os, "execvp", execvp)
    result = CliRunner().invoke(cli, ["web", *args])
    assert result.exit_code == 0, result.output
    [(program, argv)] = calls
    assert argv[0] == program and Path(program).name == "gunicorn"
    return argv[1:]


def test_plantstore_web_passes_its_arguments_to_gunicorn_with_the_projects_config(monkeypatch):
    config = str(REPO / "config" / "gunicorn.conf.py")
    assert execed(monkeypatch) == ["--config", config, "wsgi:app"]
    assert execed(monkeypatch, "--worker-tmp-dir", "/dev/shm", "-w3", "--max-requests=5") == [
        "--config", config, "--worker-tmp-dir", "/dev/shm", "-w3", "--max-requests=5",
        "wsgi:app"]
    assert execed(monkeypatch, "--", "--check-config") == [
        "--config", config, "--check-config", "wsgi:app"]


@pytest.mark.parametrize("given", [["-c", "mine.py"], ["-cmine.py"], ["--config", "mine.py"],
                                   ["--config=mine.py"], ["--conf", "mine.py"]])
def test_a_config_given_to_plantstore_web_replaces_the_projects(monkeypatch, tmp_path, given):
    assert execed(monkeypatch, *given, cwd=tmp_path) == [*given, "wsgi:app"]


def test_plantstore_web_outside_the_repository_says_where_to_run_it(tmp_path):
    result = run_plantstore("web", cwd=tmp_path, env={**os.environ, "WEB_CONCURRENCY": "2"})
    assert result.returncode == 2
    assert only_line(result.stderr) == (
        f"Error: no config/gunicorn.conf.py in {tmp_path}: run `plantstore web` in "
        "plantstore's directory (the repository, or /opt/plantstore), or pass --config PATH")


def test_every_place_that_starts_the_web_server_runs_plantstore_web():
    procfile = dict(line.split(": ", 1) for line in
                    (REPO / "config" / "Procfile").read_text().splitlines()
                    if line and not line.startswith("#"))
    assert shlex.split(procfile["web"]) == ["exec", "plantstore", "web"]
    unit = (REPO / "config" / "systemd" / "plantstore-web.service").read_text()
    [start] = re.findall(r"^ExecStart=(.*)$", unit, flags=re.M)
    assert shlex.split(start) == ["/opt/plantstore/.venv/bin/plantstore", "web"]
    assert "WorkingDirectory=/opt/plantstore" in unit
    entrypoint = (REPO / "config" / "container" / "entrypoint").read_text()
    assert re.search(r"^ +exec plantstore web ", entrypoint, flags=re.M), entrypoint
    assert "gunicorn -c" not in (REPO / "scripts" / "smoke_local.sh").read_text()


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
