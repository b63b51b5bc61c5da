"""Real gunicorn servers on the test's database: the ``gunicorn_server`` and
``split_gunicorn`` fixtures, and a burst of creates cut off by SIGKILL.

A test that uses any of these starts server processes: mark it ``slow``.
"""
import contextlib
import itertools
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import requests

from helpers import REPO, ProcessOutput, bearer, free_port, wait_until


def wait_until_up(url, process, seconds=30, output=lambda: ""):
    """Poll ``url`` until it answers; fail if ``process`` exits first, saying
    the last of what it wrote (``output``)."""
    def answers():
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}: "
                               f"{output()[-4000:]}")
        try:
            requests.get(url, timeout=1)
            return True
        except requests.ConnectionError:
            return False
    wait_until(answers, timeout=seconds, interval=0.1, message=f"{url} did not answer")


class Gunicorn:
    """A real gunicorn serving wsgi:app on a free loopback port."""

    def __init__(self, database_url, workers=2, env=None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "PLANTSTORE_DATABASE_URL": database_url,
                    "PORT": str(self.port), "WEB_CONCURRENCY": str(workers),
                    **(env or {})}
        self.process = None
        self.log = ProcessOutput()

    def launch(self):
        """Start gunicorn in a process group of its own, without waiting for it."""
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.conf.py", "wsgi:app"],
            cwd=REPO, env=self.env, stdout=self.log.file, stderr=subprocess.STDOUT,
            start_new_session=True)
        return self

    def start(self):
        self.launch()
        wait_until_up(self.url + "/healthz", self.process, output=self.output)
        return self

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def output(self):
        """Everything gunicorn and the app wrote so far."""
        return self.log.read()


class SplitGunicorn(Gunicorn):
    """A Gunicorn whose stdout and stderr are kept apart, started as operators
    do, by ``plantstore web``, which becomes gunicorn's console script
    (``python -m gunicorn`` cannot re-exec itself on USR2: its package
    directory would shadow the standard library)."""

    def start(self):
        self.stdout = ProcessOutput()
        self.process = subprocess.Popen(
            [str(Path(sys.executable).with_name("plantstore")), "web"],
            cwd=REPO, env=self.env, stdout=self.stdout.file, stderr=self.log.file,
            start_new_session=True)
        wait_until_up(self.url + "/healthz", self.process, output=self.output)
        return self

    def stdout_lines(self):
        """What gunicorn wrote on stdout, line by line."""
        return self.stdout.read().splitlines()

    def stderr_lines(self):
        """What gunicorn wrote on stderr, line by line."""
        return self.output().splitlines()


def serve(server_class, database_url):
    """Yield a starter of ``server_class`` servers on the database; stop them all after."""
    servers = []

    def start(workers=2, env=None):
        server = server_class(database_url, workers, env).start()
        servers.append(server)
        return server
    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def gunicorn_server(app, database_url):
    """Start gunicorn (``gunicorn_server(workers=2, env=None)``) on the test's
    database; every one started is stopped afterwards."""
    yield from serve(Gunicorn, database_url)


@pytest.fixture
def split_gunicorn(app, database_url):
    """Start a SplitGunicorn on the test's database; stopped afterwards."""
    yield from serve(SplitGunicorn, database_url)


def create_until_sigkilled(server, token, answered, name_of, seconds, clients=4):
    """Create plants 1, 2, ... from ``clients`` threads until ``answered`` got
    200s (or ``seconds`` passed), then SIGKILL gunicorn's whole process group.

    Returns the ids whose create was answered 200 before the kill.
    """
    next_id = itertools.count(1).__next__
    id_lock = threading.Lock()
    answered_200 = []
    stop = threading.Event()

    def burst():
        with requests.Session() as session:
            while not stop.is_set():
                with id_lock:
                    plant_id = next_id()
                try:
                    response = session.post(
                        server.url + "/plants", timeout=10, headers=bearer(token),
                        json={"id": plant_id, "name": name_of(plant_id)})
                except requests.RequestException:
                    return  # the server is gone
                if response.status_code == 200:
                    answered_200.append(plant_id)

    threads = [threading.Thread(target=burst) for _ in range(clients)]
    for thread in threads:
        thread.start()
    # Kill once enough creates were answered, or after ``seconds`` whatever the count.
    with contextlib.suppress(AssertionError):
        wait_until(lambda: len(answered_200) >= answered, timeout=seconds, interval=0.005)
    os.killpg(os.getpgid(server.process.pid), signal.SIGKILL)  # master and workers
    stop.set()
    for thread in threads:
        thread.join(timeout=15)
    server.process.wait(timeout=10)
    return answered_200
