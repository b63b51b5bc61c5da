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
from plantstore.db.models import Attempt, Delivery
from plugins.webhooks import HEADERS_TRICKLED, TRICKLE_EVERY, Answer, subscribe

# An attempt at the hanging receiver lasts its whole deadline (connect +
# read timeout): long, so that no request that waited on it can pass for fast.
HANGING = {"WEBHOOK_CONNECT_TIMEOUT": 0.5, "WEBHOOK_READ_TIMEOUT": 10.0,
           "WEBHOOK_RETRY_SCHEDULE": "0,0,0,0,0,0,0,0,0,0",
           "WEBHOOK_BREAKER_COOLDOWN": 0.5, "WORKER_POLL_INTERVAL": 0.1}
HANGING_DEADLINE = HANGING["WEBHOOK_CONNECT_TIMEOUT"] + HANGING["WEBHOOK_READ_TIMEOUT"]
# The slowest answer allowed while it hangs: a request that waited on the
# receiver would take the deadline; one that did not takes milliseconds
# (how many is the benchmark's business, not this test's).
SLOWEST_ANSWER = HANGING_DEADLINE / 2

# A worker stopped mid-attempt waits for that attempt, at most its deadline.
TRICKLING = {"WEBHOOK_CONNECT_TIMEOUT": 0.5, "WEBHOOK_READ_TIMEOUT": 2.0,
             "WEBHOOK_RETRY_SCHEDULE": "0,0,0", "WORKER_POLL_INTERVAL": 0.1}
TRICKLING_DEADLINE = TRICKLING["WEBHOOK_CONNECT_TIMEOUT"] + TRICKLING["WEBHOOK_READ_TIMEOUT"]


def environment(database_url, settings):
    """The environment of a server or worker process on the test's database."""
    return {**os.environ, **plantstore_env(database_url, **settings)}


@pytest.mark.slow
@pytest.mark.app_config(HANGING)
def test_a_hanging_receiver_slows_neither_creates_nor_reads_and_every_plant_is_delivered(
        app, runner, alice, database_url, gunicorn_server, make_receiver):
    receiver = make_receiver(Answer(delay=60))  # accepts, then answers nothing
    subscribe(runner, receiver.url)
    server = gunicorn_server(workers=2, env=environment(database_url, HANGING))
    created, slowest, failures = [], {"/healthz": 0.0, "/plants?limit=10": 0.0}, []
    stop = threading.Event()

    def create_plants(first):
        with requests.Session() as session:
            plant_id = first
            while not stop.is_set():
                try:
                    answer = session.post(server.url + "/plants", headers=bearer(alice),
                                          json={"id": plant_id, "name": "fern"}, timeout=60)
                except requests.RequestException as error:  # the server is gone
                    failures.append(repr(error))
                    return
                if answer.status_code != 200:
                    failures.append(answer.text)
                    return
                created.append(plant_id)
                plant_id += 4

    def read():
        with requests.Session() as session:
            while not stop.is_set():
                for path in slowest:
                    started = time.monotonic()
                    try:
                        answer = session.get(server.url + path, headers=bearer(alice),
                                             timeout=60)
                    except requests.RequestException as error:
                        failures.append(repr(error))
                        return
                    if answer.status_code != 200:
                        failures.append(answer.text)
                        return
                    slowest[path] = max(slowest[path], time.monotonic() - started)

    threads = [threading.Thread(target=create_plants, args=(n,)) for n in range(4)]
    threads.append(threading.Thread(target=read))
    for thread in threads:
        thread.start()
    try:
        # Until the first attempts have run into their deadline and been recorded.
        wait_until(lambda: failures or Attempt.select().count() >= 1,
                   timeout=HANGING_DEADLINE + 60, interval=0.2,
                   message="an attempt at the hanging receiver to end")
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
    assert failures == []
    assert max(slowest.values()) < SLOWEST_ANSWER, slowest
    assert len(created) > 20

    receiver.answer = Answer(200)
    receiver.released.set()

    def every_delivery_arrived():
        subprocess.run([PLANTSTORE, "worker", "--once"], cwd=REPO, capture_output=True,
                       env=environment(database_url, HANGING), timeout=120)
        return not Delivery.select().where(Delivery.status != Delivery.DELIVERED).exists()
    wait_until(every_delivery_arrived, timeout=180, interval=0.2,
               message="every delivery to arrive")
    reached = {json.loads(got.body)["id"] for got, answer
               in zip(receiver.requests, receiver.answers) if answer.status == 200}
    assert reached == set(created)


@pytest.mark.slow
@pytest.mark.app_config(TRICKLING)
def test_sigterm_stops_a_worker_within_one_attempts_deadline(
        client, runner, alice, database_url, trickler):
    receiver = trickler(*HEADERS_TRICKLED)
    trickled_for = len(HEADERS_TRICKLED[1]) * TRICKLE_EVERY  # a minute
    subscribe(runner, receiver.url)
    created = client.post("/plants", json={"id": 1, "name": "fern"}, headers=bearer(alice))
    assert created.status_code == 200
    worker = subprocess.Popen([PLANTSTORE, "worker"], cwd=REPO,
                              env=environment(database_url, TRICKLING),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # The create's attempt, then the worker's.
        wait_until(lambda: len(receiver.accepted) >= 2 or worker.poll() is not None,
                   timeout=60, message="the worker's attempt")
        assert worker.poll() is None
        signalled = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=120)
        stopped_after = time.monotonic() - signalled
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode == 0
    # Within the deadline, with room for a loaded machine; a worker that
    # waited for the receiver would take until the trickle ends.
    assert stopped_after < min(5 * TRICKLING_DEADLINE, trickled_for / 2), stopped_after
    assert Delivery.get().status == Delivery.PENDING
