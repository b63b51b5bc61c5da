"""The fuse, played for real: a receiver that hangs cannot slow the API
served by gunicorn, and loses no delivery; a worker stopped while a
receiver trickles stops within one attempt's deadline."""
import json
import os
import signal
import subprocess
import threading
import time

import pytest
import requests

from helpers import PLANTSTORE, REPO, bearer, plantstore_env, wait_until
from plantstore.models import Delivery
from plugins.webhooks import HEADERS_TRICKLED, Answer, subscribe

CONNECT, READ = 0.5, 2.0
SETTINGS = {"WEBHOOK_CONNECT_TIMEOUT": CONNECT, "WEBHOOK_READ_TIMEOUT": READ,
            "WEBHOOK_RETRY_SCHEDULE": "0,0,0,0,0,0,0,0,0,0",
            "WEBHOOK_BREAKER_COOLDOWN": 0.5, "WORKER_POLL_INTERVAL": 0.1}

pytestmark = pytest.mark.app_config(SETTINGS)


def environment(database_url):
    """The environment of a server or worker process on the test's database."""
    return {**os.environ, **plantstore_env(database_url, **SETTINGS)}


@pytest.mark.slow
def test_a_hanging_receiver_slows_neither_creates_nor_reads_and_every_plant_is_delivered(
        app, runner, alice, database_url, gunicorn_server, make_receiver):
    receiver = make_receiver(Answer(delay=60))  # accepts, then answers nothing
    subscribe(runner, receiver.url)
    server = gunicorn_server(workers=2, env=environment(database_url))
    created, slowest = [], {"/healthz": 0.0, "/plants?limit=10": 0.0}
    stop = threading.Event()

    def create_plants(first):
        with requests.Session() as session:
            plant_id = first
            while not stop.is_set():
                answer = session.post(server.url + "/plants", headers=bearer(alice),
                                      json={"id": plant_id, "name": "fern"}, timeout=30)
                assert answer.status_code == 200, answer.text
                created.append(plant_id)
                plant_id += 4

    def read():
        with requests.Session() as session:
            while not stop.is_set():
                for path in slowest:
                    started = time.monotonic()
                    answer = session.get(server.url + path, headers=bearer(alice), timeout=30)
                    assert answer.status_code == 200
                    slowest[path] = max(slowest[path], time.monotonic() - started)
                time.sleep(0.05)

    threads = [threading.Thread(target=create_plants, args=(n,)) for n in range(4)]
    threads.append(threading.Thread(target=read))
    for thread in threads:
        thread.start()
    time.sleep(2 * (CONNECT + READ) + 1)  # past the first attempts' deadline
    stop.set()
    for thread in threads:
        thread.join(timeout=60)

    # Generous for a shared machine: a stuck request would take the whole deadline.
    assert max(slowest.values()) < 2.0, slowest
    assert len(created) > 20
    receiver.answer = Answer(200)
    receiver.released.set()
    deadline = time.monotonic() + 60
    while Delivery.select().where(Delivery.status != Delivery.DELIVERED).count():
        assert time.monotonic() < deadline, "not every delivery arrived"
        subprocess.run([PLANTSTORE, "worker", "--once"], env=environment(database_url),
                       cwd=REPO, capture_output=True, timeout=60)
        time.sleep(0.2)
    reached = {json.loads(got.body)["id"] for got, answer
               in zip(receiver.requests, receiver.answers) if answer.status == 200}
    assert reached == set(created)


@pytest.mark.slow
def test_sigterm_stops_a_worker_within_one_attempts_deadline(
        client, runner, alice, database_url, trickler):
    receiver = trickler(*HEADERS_TRICKLED)
    subscribe(runner, receiver.url)
    created = client.post("/plants", json={"id": 1, "name": "fern"}, headers=bearer(alice))
    assert created.status_code == 200
    worker = subprocess.Popen([PLANTSTORE, "worker"], cwd=REPO, env=environment(database_url),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # The create's attempt, then the worker's.
        wait_until(lambda: len(receiver.accepted) >= 2 or worker.poll() is not None,
                   timeout=30, message="the worker's attempt")
        assert worker.poll() is None
        signalled = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=30)
        stopped_after = time.monotonic() - signalled
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode == 0
    assert stopped_after < CONNECT + READ + 2.0, stopped_after  # 17.6 s before the deadline
    assert Delivery.get().status == Delivery.PENDING
