"""A throttle per receiver (``rate_limit``), on the database's clock: its
token bucket, what a worker's claim and a web process's create do with a
throttled receiver, and, played for real (a web server and two workers,
each a process of its own), a receiver limited to 5 a second never sent more
than 5 × T + 5 in any T seconds while another user's receiver drains at
full speed beside it."""
import collections
import json
import os
import threading
import time

import pytest
import requests

from helpers import bearer, create_plant, plantstore_env, wait_until
from plantstore.db import clock
from plantstore.db.models import Attempt, Delivery, Subscription
from plantstore.webhooks.config import settings_of
from plantstore.webhooks.engine import queue, throttle
from plantstore.webhooks.sending.slots import Slots
from plugins.webhooks import PATIENT_SENDS, run_worker, store_plants, verify

THROTTLED = {**PATIENT_SENDS, "WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
             "WEBHOOK_RETRY_SCHEDULE": "0,0,0", "WORKER_POLL_INTERVAL": 0.1}

pytestmark = pytest.mark.app_config(THROTTLED)


def subscribe(client, token, url, rate_limit=None):
    body = {"url": url} if rate_limit is None else {"url": url, "rate_limit": rate_limit}
    response = client.post("/webhooks", json=body, headers=bearer(token))
    assert response.status_code == 201, response.data
    return response.get_json()


def empty_bucket(subscription_id):
    """Spend every token the bucket holds now."""
    while throttle.take({subscription_id: 1_000})[subscription_id]:
        pass


def test_a_bucket_holds_at_most_a_second_of_tokens_and_refills_by_the_database_clock(
        client, alice):
    limited = subscribe(client, alice, "http://127.0.0.1:9/a", rate_limit=5)["id"]
    unlimited = subscribe(client, alice, "http://127.0.0.1:9/b")["id"]
    # A new limit starts empty: a second later it holds 5, never more.
    started = time.monotonic()
    wait_until(lambda: time.monotonic() - started > 1.5, timeout=5)  # the bucket fills
    taken = throttle.take({limited: 100, unlimited: 100})
    assert taken == {limited: 5}  # the unthrottled one is not counted at all
    assert throttle.take({limited: 100}) == {limited: 0}
    throttle.give_back_tokens({limited: 3})
    assert throttle.take({limited: 100}) == {limited: 3}
    # Refilled at 5 a second by the database's clock: the next one within a second.
    refilled = time.monotonic()
    wait_until(lambda: throttle.take({limited: 1})[limited] == 1, timeout=5, interval=0.01)
    assert time.monotonic() - refilled < 1.0 + 0.5


def test_a_claim_leaves_a_throttled_receivers_deliveries_waiting_without_an_attempt(
        app, client, alice, bob, make_receiver):
    throttled, free = make_receiver(), make_receiver()
    limited = subscribe(client, alice, throttled.url, rate_limit=1)["id"]
    subscribe(client, bob, free.url)
    store_plants(app, range(1, 11), owner="alice", give_back=True)
    store_plants(app, range(11, 21), owner="bob", give_back=True)
    empty_bucket(limited)

    settings = settings_of(app)
    room = Slots(settings.worker_threads, settings.sends_per_receiver).room()
    caps = throttle.take_for_claim(room, 50)
    jobs = queue.claim(50, settings, room.subscription_default, room.owner_default,
                       {**room.subscriptions, **caps}, room.owners)
    kept = throttle.settle(caps, jobs, lambda job: queue.give_back([job]))

    assert caps[limited] <= 1
    assert sum(job.subscription_id == limited for job in kept) == caps[limited]
    assert sum(job.subscription_id != limited for job in kept) == 10  # all of bob's
    queue.give_back(kept)
    waiting = Delivery.select().where(Delivery.subscription == limited)
    assert all(d.attempts == 0 and d.locked_until is None for d in waiting)
    assert Attempt.select().count() == 0


def test_a_worker_sends_a_throttled_receiver_no_faster_than_its_limit(
        app, client, runner, alice, bob, make_receiver):
    throttled, free = make_receiver(), make_receiver()
    secret = subscribe(client, alice, throttled.url, rate_limit=2)["secret"]
    subscribe(client, bob, free.url)
    store_plants(app, range(1, 9), owner="alice", give_back=True)
    store_plants(app, range(11, 19), owner="bob", give_back=True)

    started = time.monotonic()
    run_worker(runner)
    elapsed = time.monotonic() - started

    assert len(free.wait_for(8)) == 8
    sent = len(throttled.requests)
    assert sent <= 2 * elapsed + 2, (sent, elapsed)
    for got in throttled.requests:
        verify(secret, got)
    limited = Subscription.get(Subscription.owner_id.is_null(False),
                               Subscription.rate_limit == 2).id
    held = Delivery.select().where(Delivery.subscription == limited,
                                   Delivery.status == Delivery.PENDING)
    assert held.count() == 8 - sent
    assert all(d.attempts == 0 for d in held)  # waiting used no attempt


def test_a_create_sends_a_throttled_receivers_delivery_only_with_a_token(
        app, client, alice, make_receiver):
    receiver = make_receiver()
    limited = subscribe(client, alice, receiver.url, rate_limit=1)["id"]
    empty_bucket(limited)

    create_plant(client, alice, 1)

    wait_until(lambda: Delivery.get(Delivery.subscription == limited).locked_until is None,
               timeout=10, message="the delivery given back to the workers")
    delivery = Delivery.get(Delivery.subscription == limited)
    assert delivery.attempts == 0 and delivery.status == Delivery.PENDING
    assert Attempt.select().count() == 0


def test_a_create_sends_a_throttled_receivers_delivery_at_once_with_a_token(
        app, client, alice, make_receiver):
    receiver = make_receiver()
    limited = subscribe(client, alice, receiver.url, rate_limit=5)
    stamp = time.monotonic()
    wait_until(lambda: time.monotonic() - stamp > 0.5, timeout=5)  # a token refills

    create_plant(client, alice, 1)  # no worker runs: only the web process can send it

    [got] = receiver.wait_for(1)
    assert verify(limited["secret"], got)["id"] == 1
    tokens = Subscription.get_by_id(limited["id"]).throttle_tokens
    assert tokens is not None and tokens < 5  # the token was taken from the bucket


def test_an_operators_resend_waits_for_a_token_too(app, client, runner, alice,
                                                   make_receiver):
    receiver = make_receiver()
    limited = subscribe(client, alice, receiver.url, rate_limit=1)["id"]
    store_plants(app, [1], owner="alice", give_back=True)
    delivery_id = Delivery.get(Delivery.subscription == limited).id
    empty_bucket(limited)

    result = runner.invoke(args=["deliveries", "retry", str(delivery_id)])

    assert result.exit_code == 0, result.output
    assert "waits for its receiver's rate limit" in result.stdout
    delivery = Delivery.get_by_id(delivery_id)
    assert delivery.attempts == 0 and delivery.locked_until is None
    assert receiver.requests == []


def test_an_open_breakers_probe_waits_for_a_token_too(app, client, alice, make_receiver):
    receiver = make_receiver()
    limited = subscribe(client, alice, receiver.url, rate_limit=1)["id"]
    store_plants(app, [1], owner="alice", give_back=True)
    Subscription.update(breaker_opened_at=clock.before(60), breaker_probe_at=clock.before(1),
                        failure_streak=5).where(Subscription.id == limited).execute()
    empty_bucket(limited)

    settings = settings_of(app)
    room = Slots(settings.worker_threads, settings.sends_per_receiver).room()
    caps = throttle.take_for_claim(room, 50)
    jobs = queue.claim(50, settings, room.subscription_default, room.owner_default,
                       {**room.subscriptions, **caps}, room.owners)
    given_back = []
    kept = throttle.settle(caps, jobs, given_back.append)

    assert caps == {limited: 0} and kept == []
    queue.give_back(given_back)
    delivery = Delivery.get(Delivery.subscription == limited)
    assert delivery.attempts == 0 and delivery.locked_until is None


# --- played for real ----------------------------------------------------------

RATE = 5
BACKLOG = 200
OBSERVE_SECONDS = 12.0
"""How long the throttled receiver is watched (60 of its 200 deliveries)."""


def per_second_windows_over_the_bound(arrivals, rate):
    """The windows of T whole seconds (counted from the first arrival) in which
    more than ``rate × T + rate`` arrived: [(T, first second, count)]."""
    first = min(arrivals)
    counts = collections.Counter(int(at - first) for at in arrivals)
    seconds = max(counts) + 1
    over = []
    for start in range(seconds):
        total = 0
        for length in range(1, seconds - start + 1):
            total += counts[start + length - 1]
            if total > rate * length + rate:
                over.append((length, start, total))
    return over


def create_plants(server, token, ids):
    """Create plants with these ids through the server."""
    with requests.Session() as session:
        for plant_id in ids:
            response = session.post(server.url + "/plants", headers=bearer(token),
                                    json={"id": plant_id, "name": "fern"}, timeout=60)
            assert response.status_code == 200, response.text


@pytest.mark.slow
def test_a_receiver_limited_to_5_a_second_gets_no_more_while_another_drains_at_full_speed(
        app, client, alice, bob, database_url, gunicorn_server, make_receiver,
        start_worker):
    throttled, free = make_receiver(), make_receiver()
    environment = {**os.environ, **plantstore_env(database_url, **THROTTLED)}
    server = gunicorn_server(workers=2, env=environment)
    workers = [start_worker(environment) for _ in range(2)]
    for worker in workers:
        worker.wait_started()
    # Registered last: its bucket starts empty (see throttle.limited), so what
    # the receiver counts is the steady pace, and the bound's burst term is
    # left to absorb how much longer one send than another takes to arrive.
    secret = subscribe(client, alice, throttled.url, rate_limit=RATE)["secret"]
    subscribe(client, bob, free.url)

    creators = [threading.Thread(target=create_plants, args=(server, token, ids))
                for token, ids in ((alice, range(1, BACKLOG + 1)),
                                   (bob, range(10_001, 10_001 + BACKLOG)))]
    started = time.monotonic()
    for creator in creators:
        creator.start()
    for creator in creators:
        creator.join(timeout=120)
    wait_until(lambda: len({json.loads(got.body)["id"] for got in free.requests}) == BACKLOG,
               timeout=60, interval=0.05, message="the unthrottled receiver's deliveries")
    free_done = time.monotonic() - started
    throttled_when_free_done = len(throttled.requests)
    wait_until(lambda: time.monotonic() - started > OBSERVE_SECONDS, timeout=60)
    arrivals = [got.at for got in list(throttled.requests)]
    for worker in workers:
        worker.stop()
    server.stop()

    span = max(arrivals) - min(arrivals)
    per_second = collections.Counter(int(at - min(arrivals)) for at in arrivals)
    print(f"\nthrottled, per second: {[per_second[s] for s in range(int(span) + 1)]}")
    print(f"throttled: {len(arrivals)} in {span:.1f} s; the unthrottled receiver's "
          f"{BACKLOG} done after {free_done:.1f} s, when the throttled had "
          f"{throttled_when_free_done}")
    assert per_second_windows_over_the_bound(arrivals, RATE) == []
    # Beside it, the other user's receiver drained long before the throttled one can.
    assert throttled_when_free_done <= RATE * free_done + RATE
    assert throttled_when_free_done < BACKLOG / 2
    # The throttle holds back, it does not starve: near its pace while watched.
    assert len(arrivals) >= RATE * span * 0.5, (len(arrivals), span)
    for got in throttled.requests:
        verify(secret, got)
    # What waited used no attempt: every one sent once, on its first attempt.
    limited = Subscription.get(Subscription.rate_limit == RATE).id
    ids = [json.loads(got.body)["id"] for got in throttled.requests]
    assert len(ids) == len(set(ids))
    attempts = (Delivery.select(Delivery.attempts)
                .where(Delivery.subscription == limited).tuples())
    assert sorted(collections.Counter(n for n, in attempts)) in ([0, 1], [1])
    assert Attempt.select().join(Delivery).where(
        Delivery.subscription == limited).count() == len(ids)

