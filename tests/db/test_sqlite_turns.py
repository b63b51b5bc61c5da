"""SQLite: a process stopped (SIGSTOP) while it holds the write turn. Every
create then waits at most the write wait and is answered 503; the stall
ties up at most one thread per gunicorn worker, so /healthz keeps answering
within a second, and /readyz says 503 until writes get through again."""
import concurrent.futures
import functools
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import requests

from helpers import POSTGRES_URL, bearer, wait_until

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(bool(POSTGRES_URL), reason="SQLite's write turns")]

WRITE_WAIT = 2.0

HOLD_THE_TURN = """
import pathlib, sys
from plantstore import db
database = db.database_from_url(sys.argv[1])
with database.connection_context(), database.atomic():
    pathlib.Path(sys.argv[2]).touch()
    sys.stdin.readline()  # until the test says so
"""


@pytest.fixture
def stopped_writer(database_url, tmp_path):
    """A process holding SQLite's write turn, then stopped with SIGSTOP; at
    teardown it is always resumed and killed. Yields a function that resumes
    it and lets its transaction end."""
    holding = tmp_path / "holding"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_THE_TURN, database_url, holding],
                              stdin=subprocess.PIPE, text=True)
    try:
        wait_until(holding.exists, timeout=30, message="the writer's turn")
        os.kill(holder.pid, signal.SIGSTOP)

        def resume():
            os.kill(holder.pid, signal.SIGCONT)
            holder.communicate("\n", timeout=30)
            assert holder.returncode == 0
        yield resume
    finally:
        if holder.poll() is None:
            os.kill(holder.pid, signal.SIGCONT)
            holder.kill()
        holder.wait(timeout=30)


def timed(call):
    started = time.monotonic()
    response = call()
    return response, time.monotonic() - started


def test_a_stopped_writer_never_blocks_health_and_readiness_says_503(
        gunicorn_server, alice, stopped_writer):
    server = gunicorn_server(workers=2, env={
        "PLANTSTORE_SQLITE_WRITE_WAIT_SECONDS": str(WRITE_WAIT)})
    creates, stop = [], threading.Event()

    def keep_creating(client_number):
        plant_id = client_number * 1000
        while not stop.is_set():
            plant_id += 1
            creates.append(timed(functools.partial(
                requests.post, server.url + "/plants", json={"id": plant_id, "name": "fern"},
                headers=bearer(alice), timeout=30)))

    # More clients than both workers have threads (2 x 8), all creating.
    with concurrent.futures.ThreadPoolExecutor(24) as clients:
        running = [clients.submit(keep_creating, n) for n in range(24)]
        try:
            wait_until(lambda: len(creates) >= 24, timeout=60, message="creates answered")
            health = [timed(lambda: requests.get(server.url + "/healthz", timeout=10))
                      for _ in range(20)]
            ready, ready_took = timed(lambda: requests.get(server.url + "/readyz",
                                                           timeout=10))
        finally:
            stop.set()
            for client in running:
                client.result(timeout=60)

    for response, took in health:
        assert response.status_code == 200 and took < 1, (response.status_code, took)
    assert ready.status_code == 503 and ready_took < 5, (ready.text, ready_took)
    assert ready.headers["Retry-After"] and ready.json()["error"] == 503
    for response, took in creates:
        assert response.status_code == 503, response.text
        assert response.headers["Retry-After"] and response.json()["error"] == 503
        assert took < 5 * WRITE_WAIT, took
    # The writer first in line in each worker waited the whole write wait.
    assert max(took for _, took in creates) >= WRITE_WAIT * 0.9

    stopped_writer()
    wait_until(lambda: requests.get(server.url + "/readyz", timeout=10).status_code == 200,
               timeout=30, message="ready again")
    created = requests.post(server.url + "/plants", json={"id": 1, "name": "fern"},
                            headers=bearer(alice), timeout=30)
    assert created.status_code == 200, created.text
