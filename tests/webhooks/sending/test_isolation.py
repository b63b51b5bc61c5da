"""A receiver can never hurt the API: every attempt ends at its hard
deadline even when a receiver trickles its answer, a failing receiver's
circuit breaker (shared through the database) keeps creates and workers off
it, and each process caps the attempts it has under way."""
import dataclasses
import json
import threading
import time

import pytest
import requests

from helpers import create_plant, wait_until
from plantstore.db import database, is_sqlite
from plantstore.db.models import Attempt, Delivery, Subscription
from plantstore.housekeeping.runner import Housekeeping
from plantstore.webhooks.config import settings_of
from plantstore.webhooks.engine import queue
from plantstore.webhooks.sending.web_sender import WebSender
from plantstore.webhooks.sending.worker import Worker
from plugins.webhooks import (
    BODY_TRICKLED,
    HEADERS_TRICKLED,
    Answer,
    store_plants,
    subscribe,
    wait_for_attempts,
)

CONNECT, READ = 0.5, 1.0
BOUND = CONNECT + READ

pytestmark = pytest.mark.app_config({
    "WEBHOOK_CONNECT_TIMEOUT": CONNECT, "WEBHOOK_READ_TIMEOUT": READ,
    "WEBHOOK_RETRY_SCHEDULE": "0,0,0,0,0,0", "WEBHOOK_BREAKER_THRESHOLD": 2,
    "WEBHOOK_BREAKER_COOLDOWN": 3600})


@pytest.mark.parametrize("head, trickle", [HEADERS_TRICKLED, BODY_TRICKLED],
                         ids=["headers", "body"])
def test_a_trickling_receiver_is_cut_off_at_the_deadline_and_the_socket_closed(
        client, runner, alice, trickler, head, trickle):
    receiver = trickler(head, trickle)
    subscribe(runner, receiver.url)

    create_plant(client, alice, 1)

    wait_until(lambda: Attempt.select().count() == 1)
    [attempt] = Attempt.select()
    assert attempt.status_code is None, attempt.status_code
    assert attempt.error.endswith("the answer did not arrive complete"), attempt.error
    # Cut at connect + read timeout, not after the 60 s the trickle would last.
    assert BOUND * 1000 <= attempt.duration_ms < (BOUND + 2) * 1000, attempt.duration_ms
    wait_until(lambda: receiver.hung_up)
    assert len(receiver.accepted) == 1  # nobody sent it again meanwhile
    delivery = Delivery.get()
    assert delivery.status == Delivery.PENDING and delivery.locked_until is None


def test_a_deadline_passing_after_the_answer_was_read_cuts_nothing(
        client, runner, alice, make_receiver, monkeypatch):
    """The sending thread stalls right after its connection went back to the
    pool, past the attempt's deadline: the answer still counts, and the next
    attempt takes that kept-alive connection intact."""
    receiver = make_receiver()
    subscribe(runner, receiver.url)
    close = requests.Response.close

    def close_then_stall(response):
        close(response)
        time.sleep(BOUND + 0.5)
    monkeypatch.setattr(requests.Response, "close", close_then_stall)
    create_plant(client, alice, 1)
    wait_until(lambda: Attempt.select().count() == 1, timeout=BOUND + 5)
    monkeypatch.undo()
    create_plant(client, alice, 2)
    wait_until(lambda: Attempt.select().count() == 2)

    assert [(a.status_code, a.error) for a in Attempt.select()] == [(200, None)] * 2
    first, second = receiver.requests
    assert second.client_port == first.client_port


def test_no_worker_sends_an_event_again_while_its_first_attempt_is_open(
        app, client, runner, alice, trickler):
    receiver = trickler(*HEADERS_TRICKLED)
    subscribe(runner, receiver.url)
    create_plant(client, alice, 1)
    wait_until(lambda: receiver.accepted)

    # while the create's attempt trickles:
    tally = Worker(settings_of(app), Housekeeping()).run_once()

    assert not tally and Attempt.select().count() == 0
    wait_until(lambda: Attempt.select().count() == 1)
    assert len(receiver.accepted) == 1


def test_failures_open_the_breaker_then_creates_leave_that_receiver_to_the_workers(
        app, client, runner, alice, make_receiver):
    failing = make_receiver(Answer(503))
    healthy = make_receiver()
    failing_id, _ = subscribe(runner, failing.url)
    subscribe(runner, healthy.url)
    for plant_id in (1, 2):  # threshold 2: the second failure opens it
        create_plant(client, alice, plant_id)
        wait_for_attempts(2 * plant_id)

    subscription = Subscription.get_by_id(failing_id)
    assert subscription.failure_streak == 2 and subscription.breaker_opened_at
    assert subscription.breaker_probe_at > subscription.breaker_opened_at

    create_plant(client, alice, 3)
    healthy.wait_for(3)
    wait_until(lambda: Attempt.select().count() == 5)
    assert len(failing.requests) == 2  # no attempt while open
    [waiting] = Delivery.select().where(Delivery.subscription == failing_id,
                                        Delivery.attempts == 0)
    assert waiting.locked_until is None and waiting.status == Delivery.PENDING

    listed = runner.invoke(args=["webhooks", "list"]).stdout.splitlines()
    assert "breaker open since" in listed[0] and "2 failures in a row" in listed[0]
    assert listed[1].endswith("\tbreaker closed")
    metrics = app.test_client().get("/metrics").get_data(as_text=True)
    assert f'plantstore_webhook_breaker_open{{subscription="{failing_id}"}} 1.0' in metrics
    assert 'plantstore_webhook_left_to_worker_total{reason="breaker open"}' in metrics


def test_while_open_workers_send_one_probe_per_cooldown_and_its_success_closes_it(
        app, client, runner, alice, make_receiver):
    receiver = make_receiver(Answer(503))
    subscription_id, _ = subscribe(runner, receiver.url)
    for plant_id in (1, 2):  # the second failure opens the breaker
        create_plant(client, alice, plant_id)
        wait_for_attempts(plant_id)
    for plant_id in range(3, 6):
        create_plant(client, alice, plant_id)
    due_now = Subscription.update(breaker_probe_at=Subscription.breaker_opened_at)
    due_now.where(Subscription.id == subscription_id).execute()
    opened = Subscription.get_by_id(subscription_id)

    # one probe, still failing:
    assert Worker(settings_of(app), Housekeeping()).run_once() == {"retry": 1}
    assert len(receiver.requests) == 3
    probed = Subscription.get_by_id(subscription_id)  # still open since the same time
    assert probed.failure_streak == 3 and probed.breaker_opened_at == opened.breaker_opened_at
    assert probed.breaker_probe_at > opened.breaker_probe_at
    assert Worker(settings_of(app), Housekeeping()).run_once() == {}  # next probe a cooldown away

    receiver.answer = Answer(200)
    due_now.where(Subscription.id == subscription_id).execute()
    assert Worker(settings_of(app), Housekeeping()).run_once() == {"delivered": 5}
    subscription = Subscription.get_by_id(subscription_id)
    assert subscription.breaker_opened_at is None and subscription.failure_streak == 0
    assert {d.status for d in Delivery.select()} == {Delivery.DELIVERED}


def test_enabling_a_subscription_again_closes_its_breaker(client, runner, alice,
                                                          make_receiver):
    receiver = make_receiver(Answer(503))
    subscription_id, _ = subscribe(runner, receiver.url)
    for plant_id in (1, 2):  # the second failure opens the breaker
        create_plant(client, alice, plant_id)
        wait_for_attempts(plant_id)
    queue.disable(subscription_id, queue.FAILING, "failing for too long")
    receiver.answer = Answer(200)

    assert runner.invoke(args=["webhooks", "enable", str(subscription_id)]).exit_code == 0

    subscription = Subscription.get_by_id(subscription_id)
    assert (subscription.failure_streak, subscription.breaker_opened_at,
            subscription.breaker_probe_at) == (0, None, None)
    create_plant(client, alice, 3)
    assert json.loads(receiver.wait_for(3)[2].body)["id"] == 3  # attempted by the create


# Three slots: the operator, the only owner, may hold all but one of them,
# and its receiver two.
@pytest.mark.parametrize("app_config", [{
    "WEBHOOK_CONNECT_TIMEOUT": CONNECT, "WEBHOOK_READ_TIMEOUT": 30,
    "WEBHOOK_SENDS_PER_PROCESS": 3, "WEBHOOK_SENDS_PER_RECEIVER": 2}])
def test_past_the_cap_a_create_leaves_its_deliveries_to_the_workers_and_holds_no_connection(
        app, client, runner, alice, make_receiver):
    hanging = make_receiver(Answer(delay=60))
    subscribe(runner, hanging.url)
    for plant_id in range(1, 5):
        create_plant(client, alice, plant_id)
    hanging.wait_for(2)

    # Two attempts hang; the other two deliveries are free for any worker.
    wait_until(lambda: Delivery.select().where(Delivery.locked_until.is_null()).count() == 2)
    assert len(hanging.requests) == 2
    database.close()  # this test's own
    # The outcome writer gives its connection back once the give-backs are
    # written; the sender threads wait on the receiver holding none (peewee's
    # pool has no public count of the connections in use).
    wait_until(lambda: not database.obj._in_use)


def test_a_slow_receiver_does_not_hold_up_another_receivers_deliveries_in_the_worker(
        app, client, runner, alice, make_receiver):
    # A 409 asks for a retry without counting against the breaker.
    slow, fast = make_receiver(Answer(409)), make_receiver(Answer(409))
    subscribe(runner, slow.url)
    subscribe(runner, fast.url)
    for plant_id in range(1, 3):
        create_plant(client, alice, plant_id)
    wait_until(lambda: Attempt.select().count() == 4)
    slow.answer = Answer(delay=60)  # until released
    fast.answer = Answer(200)
    worker = Worker(settings_of(app), Housekeeping())
    finished = threading.Thread(target=worker.run_once)
    finished.start()
    try:
        fast.wait_for(4)  # both of the fast receiver's, while the slow ones hang
        slow.wait_for(4)
        wait_until(lambda: worker.slots.held() == 2)  # the slow ones only
    finally:
        slow.released.set()
        finished.join(timeout=30)
    assert worker.tally == {"delivered": 4}


def one_slot_per_receiver(app, slots=4):
    """The app's settings with a receiver's attempts one at a time."""
    return dataclasses.replace(settings_of(app), sends_per_process=slots,
                               worker_threads=slots, sends_per_receiver=1)


@pytest.mark.parametrize("status, frees_its_slot", [(200, True), (503, False)])
def test_only_a_failed_attempt_holds_its_receivers_slot_until_its_outcome_is_written(
        app, runner, alice, make_receiver, status, frees_its_slot):
    receiver = make_receiver(Answer(status))
    subscribe(runner, receiver.url)
    first, second = store_plants(app, (1, 2))
    web_sender = WebSender(one_slot_per_receiver(app))

    with database.atomic():  # outcome writes wait for this transaction
        if not is_sqlite():
            list(Delivery.select().for_update())
        web_sender.offer([first])
        receiver.wait_for(1)
        # The attempt has ended once its outcome waits to be written.
        wait_until(lambda: web_sender.writer.unwritten() == 1)
        if frees_its_slot:
            wait_until(lambda: web_sender.slots.held() == 0)
            web_sender.offer([second])
            receiver.wait_for(2)
        else:
            assert web_sender.slots.held() == 1
            web_sender.offer([second])  # no slot: given back, left to the workers
            assert web_sender.writer.unwritten() == 2
        assert Attempt.select().count() == 0  # no outcome written yet

    web_sender.finish()
    assert web_sender.writer.unwritten() == 0
    assert Attempt.select().count() == len(receiver.requests)
    if not frees_its_slot:
        assert len(receiver.requests) == 1 and given_back(second)


def given_back(job):
    """Whether ``job``'s delivery is pending, unattempted and free to claim."""
    delivery = Delivery.get_by_id(job.delivery_id)
    return (delivery.status == Delivery.PENDING and delivery.attempts == 0
            and delivery.locked_until is None)


def test_a_worker_attempts_one_receiver_no_more_than_its_cap_at_once_and_claims_as_slots_free(
        app, runner, alice, make_receiver):
    receiver = make_receiver(Answer(200, delay=0.3))
    other = make_receiver(Answer(200, delay=0.3))
    subscribe(runner, receiver.url)
    subscribe(runner, other.url)
    store_plants(app, (1, 2, 3), give_back=True)

    tally = Worker(one_slot_per_receiver(app), Housekeeping()).run_once()

    assert tally == {"delivered": 6}
    for got in (receiver.wait_for(3), other.wait_for(3)):
        assert all(later.at >= earlier.finished for earlier, later in zip(got, got[1:]))
    # The two receivers' attempts ran side by side.
    assert receiver.requests[0].at < other.requests[0].finished
    assert other.requests[0].at < receiver.requests[0].finished


def test_a_stopping_worker_ends_the_attempt_under_way_and_leaves_the_rest_free_to_claim(
        app, client, runner, alice, make_receiver):
    receiver = make_receiver(Answer(409))  # a retry, not a breaker failure
    subscribe(runner, receiver.url)
    for plant_id in range(1, 4):
        create_plant(client, alice, plant_id)
    wait_until(lambda: Attempt.select().count() == 3)
    receiver.answer = Answer(200, delay=0.5)
    worker = Worker(one_slot_per_receiver(app), Housekeeping())
    running = threading.Thread(target=worker.run_forever)
    running.start()
    try:
        receiver.wait_for(4)  # the worker's first attempt; its receiver has no more room
        worker.stop()
        running.join(timeout=30)
    finally:
        receiver.released.set()
    assert not running.is_alive()
    assert worker.tally == {"delivered": 1}
    assert len(receiver.requests) == 4
    waited = Delivery.select().where(Delivery.status == Delivery.PENDING)
    assert waited.count() == 2 and all(row.locked_until is None for row in waited)


def test_the_worker_loop_never_waits_for_a_whole_batch(app, client, runner, alice,
                                                       make_receiver):
    receiver = make_receiver(Answer(503))
    subscribe(runner, receiver.url)
    create_plant(client, alice, 1)
    wait_until(lambda: Attempt.select().count() == 1)
    receiver.answer = lambda got: Answer(
        200, delay=60 if json.loads(got.body)["id"] == 1 else 0)
    worker = Worker(settings_of(app), Housekeeping())
    finished = threading.Thread(target=worker.run_forever)
    finished.start()
    try:
        receiver.wait_for(2)  # the retry of plant 1 hangs in the worker
        create_plant(client, alice, 2)
        receiver.wait_for(3)  # plant 2 is not held behind it
    finally:
        worker.stop()
        receiver.released.set()
        finished.join(timeout=30)
    assert not finished.is_alive()


def test_no_answer_and_5xx_count_as_failures_and_a_2xx_ends_the_streak():
    from plantstore.webhooks.engine import rules as breaker
    from plantstore.webhooks.sending.http_post import SendResult
    now = None
    results = [SendResult(now, 1, error="connection failed"), SendResult(now, 1, 503),
               SendResult(now, 1, 404), SendResult(now, 1, 302)]
    assert [breaker.is_failure(result) for result in results] == [True, True, False, False]
    assert breaker.streak_change(results) == (False, 2)
    assert breaker.streak_change(results[:2] + [SendResult(now, 1, 200)]) == (True, 0)
    assert breaker.streak_change([SendResult(now, 1, 204)] + results) == (True, 2)
