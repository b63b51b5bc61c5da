"""The image's health check (``config/container/healthcheck``) against a
real gunicorn on each bind form the settings accept, as in a container: the
server and the check in a PID namespace of their own (the check looks for
gunicorn among the processes it sees). Healthy while ``/healthz`` answers
200; unhealthy, within its 3 s, while it does not (gunicorn stopped)."""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from helpers import (
    PLANTSTORE,
    REPO,
    free_port,
    plantstore_env,
    run_plantstore,
    system_program_missing,
    wait_until,
)

HEALTHCHECK = REPO / "config" / "container" / "healthcheck"


class NamespacedServer:
    """``plantstore web`` as PID 1 of a PID namespace of its own (``unshare``)."""

    def __init__(self, env, args=()):
        self.log, self.env = tempfile.TemporaryFile(), env
        self.process = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount-proc", str(PLANTSTORE), "web", *args],
            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=self.log,
            start_new_session=True)

    def output(self):
        fd = self.log.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")

    def wait_until_booted(self):
        """Wait until gunicorn listens and its worker has booted; where it
        says it listens."""
        def booted():
            if self.process.poll() is not None:
                raise AssertionError(f"the server exited: {self.output()}")
            return "Booting worker" in self.output() and re.search(
                r'"Listening at: (\S+) ', self.output()).group(1)
        return wait_until(booted, timeout=60, interval=0.05, message=self.output)

    def gunicorn_pid(self):
        """The master's pid as this process sees it (unshare's one child)."""
        def child():
            if self.process.poll() is not None:
                raise AssertionError(f"the server exited with {self.process.returncode}")
            children = (f"/proc/{self.process.pid}/task/{self.process.pid}/children")
            return open(children).read().split()
        [pid] = wait_until(child, timeout=30, interval=0.05, message="unshare's child")
        return int(pid)

    def check(self):
        """The health check run in the server's namespaces and environment: its exit status,
        stderr and seconds taken."""
        began = time.monotonic()
        result = subprocess.run(
            ["nsenter", "--target", str(self.gunicorn_pid()), "--pid", "--mount",
             sys.executable, str(HEALTHCHECK)],
            env=self.env, capture_output=True, text=True, timeout=60)  # as in a container
        return result.returncode, result.stderr, time.monotonic() - began

    def stop(self):
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)


@pytest.fixture
def namespaced_server(tmp_path, database_url):
    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("nsenter")):
        system_program_missing("needs root, unshare and nsenter (Debian package util-linux)")
    env = {**os.environ, **plantstore_env(database_url), "WEB_CONCURRENCY": "1"}
    for name in ("GUNICORN_BIND", "HOST", "PORT", "PROMETHEUS_MULTIPROC_DIR"):
        env.pop(name, None)
    assert run_plantstore("db", "upgrade", env=env).returncode == 0
    started = []

    def start(variables, args=()):
        started.append(NamespacedServer({**env, **variables}, args))
        return started[-1]
    yield start
    for server in started:
        server.stop()


BIND_FORMS = ["HOST and PORT", "0.0.0.0:P", "[::1]:P", "[::]:P", "HOST=::", "unix:PATH",
              "--bind"]


def bind_form(form, tmp_path):
    """The variables and arguments that make gunicorn listen in ``form``, and
    where gunicorn then says it listens."""
    port, other = free_port(), free_port()
    sock = tmp_path / "web.sock"
    return {
        "HOST and PORT": ({"HOST": "127.0.0.1", "PORT": f"{port}"}, (),
                          f"http://127.0.0.1:{port}"),
        "0.0.0.0:P": ({"GUNICORN_BIND": f"0.0.0.0:{port}"}, (), f"http://0.0.0.0:{port}"),
        "[::1]:P": ({"GUNICORN_BIND": f"[::1]:{port}"}, (), f"http://[::1]:{port}"),
        "[::]:P": ({"GUNICORN_BIND": f"[::]:{port}"}, (), f"http://[::]:{port}"),
        "HOST=::": ({"HOST": "::", "PORT": f"{port}"}, (), f"http://[::]:{port}"),
        "unix:PATH": ({"GUNICORN_BIND": f"unix:{sock}"}, (), f"unix:{sock}"),
        "--bind": ({"PORT": f"{port}"}, ("--bind", f"127.0.0.2:{other}"),
                   f"http://127.0.0.2:{other}"),
    }[form]


def healthy(server):
    """Once gunicorn has booted, the check's exit status and stderr."""
    server.wait_until_booted()
    return server.check()[:2]


@pytest.mark.slow
@pytest.mark.parametrize("form", BIND_FORMS)
def test_healthy_while_healthz_answers_200_on_every_bind_form(namespaced_server, tmp_path,
                                                              form):
    variables, args, listening = bind_form(form, tmp_path)
    server = namespaced_server(variables, args)
    assert healthy(server) == (0, "")
    assert server.wait_until_booted() == listening


@pytest.mark.slow
def test_unhealthy_within_its_timeout_while_gunicorn_does_not_answer(namespaced_server,
                                                                     tmp_path):
    port = free_port()
    server = namespaced_server({"GUNICORN_BIND": f"0.0.0.0:{port}"})
    assert healthy(server) == (0, "")
    os.killpg(server.process.pid, signal.SIGSTOP)  # gunicorn accepts, nobody answers
    try:
        code, stderr, took = server.check()
    finally:
        os.killpg(server.process.pid, signal.SIGCONT)
    assert code == 1, stderr
    assert stderr.startswith(f"/healthz did not answer at 127.0.0.1:{port}: timed out"), stderr
    assert took < 3 * 5, took
