"""The promise: every plant whose create returned 200 reaches every active
receiver at least once, and no event is sent twice at once. Workers racing
on one database, leases left by a process that died, a receiver that was
down, a worker stopped by a signal, a gunicorn SIGKILLed mid-burst, and a
gunicorn worker stopping while an attempt is under way."""
import json
import os
import signal
import threading
import types
from collections import Counter

import pytest

from helpers import create_plant, free_port, plantstore_env, run_plantstore, wait_until
from plantstore.db import clock
from plantstore.db.models import Attempt, Delivery, Plant, Subscription
from plantstore.housekeeping.runner import Housekeeping
from plantstore.server.gunicorn import finish_webhook_attempts
from plantstore.webhooks.config import settings_of, web_sender_of
from plantstore.webhooks.engine import queue
from plantstore.webhooks.sending.worker import Worker
from plugins.servers import create_until_sigkilled
from plugins.webhooks import (
    SHORT_LEASES,
    Answer,
    run_worker,
    sleep_until,
    store_plants,
    subscribe,
    verify,
    wait_for_attempts,
    wait_for_leases_to_run_out,
)

pytestmark = pytest.mark.app_config(SHORT_LEASES)


def environment(database_url, **extra):
    """The environment of a plantstore process on the test's database."""
    return {**os.environ, **plantstore_env(database_url, **{**SHORT_LEASES, **extra})}


def payload_id(received):
    return json.loads(received.body)["id"]


def attempts_of_undelivered():
    """What the attempts at deliveries not yet delivered gave, for a failure's message."""
    return [(attempt.delivery_id, attempt.started_at, attempt.status_code, attempt.error)
            for attempt in Attempt.select().join(Delivery)
            .where(Delivery.status != Delivery.DELIVERED).order_by(Attempt.id)]


# Every create's own attempt must be made (and fail): no cap or breaker in the
# way. The workers claim two at a time and each attempt takes a quarter of a
# second, so that both take part however late one starts on a loaded machine.
@pytest.mark.app_config({**SHORT_LEASES, "WORKER_BATCH_SIZE": 2, "WEBHOOK_BREAKER_THRESHOLD": 100,
                         "WEBHOOK_READ_TIMEOUT": 5,
                         "WEBHOOK_SENDS_PER_PROCESS": 32, "WEBHOOK_SENDS_PER_RECEIVER": 32})
def test_two_workers_at_once_deliver_each_event_exactly_once(
        app, client, runner, alice, make_receiver):
    events = 24
    receiver = make_receiver(Answer(500))
    subscribe(runner, receiver.url)
    for plant_id in range(events):
        create_plant(client, alice, plant_id, f"plant {plant_id}")
    wait_for_attempts(events, timeout=10)
    receiver.answer = Answer(200, delay=0.25)
    settings = settings_of(app)
    start = threading.Barrier(2)
    tallies = []

    def work():
        worker = Worker(settings, Housekeeping())
        start.wait()
        tallies.append(worker.run_once())

    threads = [threading.Thread(target=work) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    delivered = Counter(got.headers["webhook-id"] for got, answer
                        in zip(receiver.requests, receiver.answers) if answer.status == 200)
    assert len(delivered) == events and set(delivered.values()) == {1}, attempts_of_undelivered()
    assert len(tallies) == 2 and all(tally["delivered"] > 0 for tally in tallies), tallies
    assert sum(tally["delivered"] for tally in tallies) == events
    assert Attempt.select().count() == 2 * events
    assert {d.status for d in Delivery.select()} == {Delivery.DELIVERED}


@pytest.mark.app_config({**SHORT_LEASES, "WEBHOOK_LEASE_SECONDS": 2.5})
def test_deliveries_of_a_process_that_died_after_the_commit_wait_out_its_lease(
        app, runner, alice, make_receiver):
    receiver = make_receiver()
    _, secret = subscribe(runner, receiver.url)
    [job] = store_plants(app, [1])
    # No send after the commit: the request's process is gone.

    assert run_worker(runner) == "nothing due"
    assert receiver.requests == []
    sleep_until(Delivery.get_by_id(job.delivery_id).locked_until)
    assert run_worker(runner) == "delivered 1"
    [got] = receiver.wait_for(1)
    assert got.headers["webhook-id"] == job.message_id
    assert verify(secret, got) == {"id": 1, "name": "plant 1"}


# One attempt at a time per receiver, and its breaker opens at the first
# failure: every claim after the first finds the receiver busy (with its probe,
# then with each attempt).
@pytest.mark.app_config({**SHORT_LEASES, "WEBHOOK_SENDS_PER_RECEIVER": 1,
                         "WEBHOOK_BREAKER_THRESHOLD": 1, "WEBHOOK_BREAKER_COOLDOWN": 0.5})
def test_worker_once_claims_again_when_the_attempts_it_waited_on_ended_during_its_claim(
        app, client, runner, alice, make_receiver, monkeypatch):
    events = 20
    receiver = make_receiver(Answer(503))
    subscription_id, _ = subscribe(runner, receiver.url)
    for plant_id in range(events):
        create_plant(client, alice, plant_id, f"plant {plant_id}")
    wait_for_attempts(1, timeout=10)  # the first create's; the breaker kept the rest back
    receiver.answer = Answer(200)
    # A create leased before the breaker opened may still be attempted by the
    # web process, and its failure moves the next probe: let it end first.
    web_sender_of(app).finish()
    sleep_until(Subscription.get_by_id(subscription_id).breaker_probe_at)
    worker = Worker(settings_of(app), Housekeeping())
    claim = queue.claim

    def claim_behind_the_outcome_write(*args, **kwargs):
        """Claim, then let the outcomes of the attempts that ended be written,
        as when the writer commits while a claim's statement runs."""
        jobs = claim(*args, **kwargs)
        assert worker.writer.flush(10)
        return jobs

    monkeypatch.setattr(queue, "claim", claim_behind_the_outcome_write)
    tally = worker.run_once()

    assert tally["delivered"] == events, tally
    assert {d.status for d in Delivery.select()} == {Delivery.DELIVERED}


# Attempts held by the receiver until released: long enough a read timeout
# and lease that nothing times out while the test looks.
@pytest.mark.app_config({**SHORT_LEASES, "WEBHOOK_SENDS_PER_RECEIVER": 2, "WORKER_THREADS": 4,
                         "WEBHOOK_READ_TIMEOUT": 20, "WEBHOOK_LEASE_SECONDS": 120})
def test_a_worker_claims_ahead_of_its_slots_and_gives_the_waiting_jobs_back_unsent_on_stop(
        app, runner, alice, make_receiver):
    receiver = make_receiver(Answer(200, delay=60))  # answers once released
    subscribe(runner, receiver.url)
    store_plants(app, range(1, 11), give_back=True)
    worker = Worker(settings_of(app), Housekeeping())
    thread = threading.Thread(target=worker.run_forever)
    thread.start()
    try:
        receiver.wait_for(2)  # the receiver's two slots
        leased = Delivery.select().where(Delivery.locked_until > clock.now())
        wait_until(lambda: leased.count() == 6, timeout=10,
                   message=lambda: f"{leased.count()} deliveries leased, expected 2 under "
                                   "way and 4 waiting for their slots")
    finally:
        worker.stop()
        receiver.released.set()
        thread.join(timeout=60)
    assert not thread.is_alive()
    assert len(receiver.requests) == 2
    assert Delivery.select().where(Delivery.status == Delivery.DELIVERED).count() == 2
    assert not leased.exists()  # the four waiting were given back, not left to their lease
    assert Attempt.select().count() == 2


@pytest.mark.slow
def test_worker_once_delivers_what_waited_while_the_receiver_was_down(
        client, runner, alice, database_url, make_receiver):
    port = free_port()
    _, secret = subscribe(runner, f"http://127.0.0.1:{port}/hook")
    create_plant(client, alice, 1, "plant 1")
    wait_for_attempts(1, timeout=10)
    delivery = Delivery.get()
    assert delivery.status == Delivery.PENDING
    assert delivery.last_error == "connection refused"

    receiver = make_receiver(port=port)
    finished = run_plantstore("worker", "--once", env=environment(database_url))

    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.strip() == "delivered 1"
    [got] = receiver.wait_for(1)
    assert got.headers["webhook-id"] == delivery.message_id
    assert verify(secret, got) == {"id": 1, "name": "plant 1"}
    assert Delivery.get().status == Delivery.DELIVERED


@pytest.mark.slow
@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT],
                         ids=["SIGTERM", "SIGINT"])
def test_the_worker_polls_for_due_deliveries_and_stops_cleanly_on_a_signal_after_the_one_under_way(
        client, runner, alice, database_url, make_receiver, start_worker, stop_signal):
    receiver = make_receiver(Answer(500))
    subscribe(runner, receiver.url)
    worker = start_worker(environment(database_url, WEBHOOK_READ_TIMEOUT=3))
    worker.wait_started()  # polling an empty queue
    # The create's own attempt fails; the worker's is held a second.
    receiver.answer = lambda got: Answer(500) if not receiver.requests \
        else Answer(200, delay=1.0)
    create_plant(client, alice, 1, "plant 1")
    receiver.wait_for(2, timeout=20)  # the worker's attempt, held by the receiver

    assert worker.stop(stop_signal) == 0, worker.output()
    delivery = Delivery.get()
    assert delivery.status == Delivery.DELIVERED and delivery.attempts == 2
    assert len(receiver.requests) == 2


# Odd ids fail at first, and on a loaded machine an even id's attempt may
# outlive SHORT_LEASES' read timeout: five such failures in a row would open
# the breaker, and the worker would then rightly wait for its probe, half a
# minute away. The breaker is not this test's subject, so it stays closed.
@pytest.mark.slow
def test_every_create_answered_200_reaches_the_receiver_after_gunicorn_is_sigkilled_mid_burst(
        app, runner, alice, database_url, gunicorn_server, make_receiver):
    receiver = make_receiver(lambda got: Answer(200 if payload_id(got) % 2 == 0 else 503))
    subscribe(runner, receiver.url)
    server = gunicorn_server(workers=2, env=environment(
        database_url, WEBHOOK_BREAKER_THRESHOLD=1000))
    answered_200 = create_until_sigkilled(server, alice, 40, lambda plant_id: "fern",
                                          seconds=15)
    assert len(answered_200) >= 40, server.output()

    receiver.answer = Answer(200)
    wait_for_leases_to_run_out()  # of the rows being written or sent at the kill
    # The worker gets the default timeouts: its own attempts must not time
    # out on a busy machine, or they would wait for a later run.
    finished = run_plantstore("worker", "--once", env=environment(
        database_url, WEBHOOK_CONNECT_TIMEOUT=2, WEBHOOK_READ_TIMEOUT=5,
        WEBHOOK_BREAKER_THRESHOLD=1000))
    assert finished.returncode == 0, finished.stderr

    reached = {payload_id(got) for got, answer in zip(receiver.requests, receiver.answers)
               if answer.status == 200}
    assert set(answered_200) <= reached, (finished.stdout, attempts_of_undelivered())
    committed = {plant.id for plant in Plant.select(Plant.id)}
    assert set(answered_200) <= committed <= reached
    assert {d.status for d in Delivery.select()} == {Delivery.DELIVERED}


def test_a_stopping_gunicorn_worker_lets_its_attempts_end_and_records_them(
        app, client, runner, alice, make_receiver):
    receiver = make_receiver(Answer(200, delay=0.3))  # within SHORT_LEASES' timeouts
    subscribe(runner, receiver.url)
    create_plant(client, alice, 1)
    receiver.wait_for(1)  # the create's attempt is under way, its answer 0.3 s away

    finish_webhook_attempts(server=None, worker=types.SimpleNamespace(wsgi=app))

    delivery = Delivery.get()
    assert delivery.status == Delivery.DELIVERED and delivery.locked_until is None
