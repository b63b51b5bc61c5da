"""The delivery queue's promises (``webhooks/engine/queue.py``): an outcome is
written only under the lease its sender holds; an attempt starts only while
its lease outlasts it; no event is under way twice at once while the
database stalls past every lease or the hosts' clocks disagree; claims are
fair between owners and between receivers; and each process's sending
slots are shared fairly (``webhooks/sending/slots.py``)."""
import collections
import dataclasses
import datetime
import logging
import os
import random
import threading
import time
import types

import psycopg2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import POSTGRES_URL, plantstore_env, wait_until, wall_clock_off
from plantstore.db import clock, database
from plantstore.db.models import Attempt, Delivery, Subscription, User
from plantstore.housekeeping.runner import Housekeeping
from plantstore.webhooks.config import settings_of
from plantstore.webhooks.engine import queue
from plantstore.webhooks.receivers.secrets import new_secret
from plantstore.webhooks.sending.http_post import SendResult
from plantstore.webhooks.sending.slots import Slots
from plantstore.webhooks.sending.web_sender import WebSender
from plantstore.webhooks.sending.worker import Worker
from plugins.webhooks import Answer, overlapping_sends, store_plants, subscribe

postgres_only = pytest.mark.skipif(
    not POSTGRES_URL, reason="PostgreSQL only: SQLite serves one host (one clock) and runs "
                             "one write transaction at a time")

ROOMY = 1000
"""A room no test fills: no cap in the way."""


def claim(settings, limit=ROOMY, subscription_room=ROOMY, owner_room=ROOMY, **rooms):
    """What one ``queue.claim`` leases to this process."""
    return queue.claim(limit, settings, subscription_room, owner_room, **rooms)


def answered(status):
    """The result of an attempt the receiver answered with ``status``."""
    return SendResult(clock.local_now(), 5, status_code=status)


# --- the lease token -----------------------------------------------------------

def test_an_outcome_or_give_back_under_a_lease_another_sender_took_over_writes_nothing(
        app, runner, alice, caplog):
    subscribe(runner, "http://127.0.0.1:9/hook")
    settings = settings_of(app)
    store_plants(app, [1], give_back=True)
    [first] = claim(settings)
    Delivery.update(locked_until=clock.before(1)).execute()  # its lease ran out
    [second] = claim(settings)
    assert (second.delivery_id, second.lease) == (first.delivery_id, first.lease + 1)

    with caplog.at_level(logging.WARNING, logger=queue.__name__):
        assert queue.record([(first, answered(200))], settings) == [None]
    queue.give_back([first])

    delivery = Delivery.get()
    assert (delivery.status, delivery.attempts, delivery.lease) == (
        Delivery.PENDING, 0, second.lease)
    assert delivery.locked_until is not None  # still the second sender's
    assert Attempt.select().count() == 0
    [line] = [r.getMessage() for r in caplog.records if "not written" in r.getMessage()]
    assert f"delivery {first.delivery_id} ({first.message_id})" in line
    assert "another sender claimed it" in line
    # The sender holding the lease writes its outcome.
    assert queue.record([(second, answered(200))], settings) == [queue.DELIVERED]
    assert Delivery.get().status == Delivery.DELIVERED and Attempt.select().count() == 1


def test_an_outcome_for_a_delivery_deleted_with_its_subscription_says_so(
        app, runner, alice, caplog):
    subscription_id, _ = subscribe(runner, "http://127.0.0.1:9/hook")
    [job] = store_plants(app, [1])
    removed = runner.invoke(args=["webhooks", "remove", str(subscription_id)])
    assert removed.exit_code == 0, removed.output

    with caplog.at_level(logging.WARNING, logger=queue.__name__):
        assert queue.record([(job, answered(503))], settings_of(app)) == [None]

    [line] = [r.getMessage() for r in caplog.records if "not written" in r.getMessage()]
    assert "it was deleted with its subscription" in line
    assert "another sender" not in line
    assert Attempt.select().count() == 0 and Delivery.select().count() == 0


@postgres_only
def test_a_give_back_takes_a_subscriptions_row_before_its_deliveries(app, runner, alice):
    """The one lock order: while a subscription's DELETE holds its row, a
    give-back waits for it holding none of that subscription's deliveries
    (one that took them first deadlocked with the DELETE's cascade), and
    gives every lease back once the row is free."""
    deleted, _ = subscribe(runner, "http://127.0.0.1:9/deleted")
    subscribe(runner, "http://127.0.0.1:9/kept")
    jobs = store_plants(app, [1])
    deleting, looking = psycopg2.connect(POSTGRES_URL), psycopg2.connect(POSTGRES_URL)
    looking.autocommit = True  # each look a fresh snapshot of pg_stat_activity
    given_back = threading.Thread(target=queue.give_back, args=(jobs,))
    try:
        with deleting.cursor() as cursor:  # a DELETE's first lock, in a transaction left open
            cursor.execute("SELECT id FROM subscription WHERE id = %s FOR UPDATE", (deleted,))
        given_back.start()

        def give_back_waits():
            with looking.cursor() as cursor:
                cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type "
                               "= 'Lock' AND query LIKE '%UPDATE delivery d SET locked_until%'")
                return cursor.fetchone()[0] == 1
        wait_until(give_back_waits, 30, interval=0.05,
                   message="the give-back to wait for the subscription's row")
        with looking.cursor() as cursor:  # none of its deliveries is held meanwhile
            cursor.execute("SELECT id FROM delivery WHERE subscription_id = %s "
                           "FOR UPDATE NOWAIT", (deleted,))
    finally:
        deleting.rollback()
        deleting.close()
        looking.close()
        given_back.join(timeout=30)
    assert not given_back.is_alive()
    assert not Delivery.select().where(Delivery.locked_until.is_null(False)).exists()


@postgres_only
def test_a_job_a_create_leased_but_read_with_its_breaker_open_is_given_back(app, runner,
                                                                          alice):
    """PostgreSQL's create leases a delivery by one snapshot of its
    receiver's breaker and reads its job by the next: a breaker that opened
    in between must not leave the lease held until it runs out."""
    subscribe(runner, "http://127.0.0.1:9/hook")
    [job] = store_plants(app, [1])  # leased to this process by the create
    row = {field.name: getattr(job, field.name) for field in dataclasses.fields(job)
           if field.name not in ("leased_at", "lease_seconds")}
    assert queue.jobs_to_send([{**row, "breaker_open": True}], time.monotonic(),
                              settings_of(app)) == []
    assert Delivery.get_by_id(job.delivery_id).locked_until is None


# --- an attempt starts only while its lease outlasts it ------------------------

def lease_shorter_than_an_attempt(app):
    """The app's settings with a lease (30 s) shorter than one attempt's
    deadline (30 s) plus the margin: no attempt may start under it, and no
    lease runs out while a test watches."""
    return dataclasses.replace(settings_of(app), connect_timeout=5.0, read_timeout=25.0,
                               lease_seconds=30.0)


def test_a_worker_gives_back_unsent_a_job_whose_lease_would_end_during_its_attempt(
        app, runner, alice, make_receiver):
    receiver = make_receiver()
    subscribe(runner, receiver.url)
    [job] = store_plants(app, [1], give_back=True)
    short = lease_shorter_than_an_attempt(app)
    worker = Worker(short, Housekeeping())
    running = threading.Thread(target=worker.run_forever)
    running.start()
    try:
        # Each claim bumps the token: claimed, given back and claimed again,
        # twice, long before a 30 s lease could have run out.
        wait_until(lambda: Delivery.get().lease >= job.lease + 3, timeout=20,
                   message="the worker to claim the delivery again")
    finally:
        worker.stop()
        running.join(timeout=60)
    assert not running.is_alive()

    assert receiver.requests == [] and Attempt.select().count() == 0
    assert not worker.tally
    delivery = Delivery.get()
    assert (delivery.status, delivery.attempts, delivery.locked_until) == (
        Delivery.PENDING, 0, None)
    [again] = claim(settings_of(app))  # claimable at once, by any sender
    assert again.delivery_id == job.delivery_id


def test_a_web_sender_gives_back_unsent_a_job_whose_lease_would_end_during_its_attempt(
        app, runner, alice, make_receiver):
    receiver = make_receiver()
    subscribe(runner, receiver.url)
    short = lease_shorter_than_an_attempt(app)
    store_plants(app, [1], give_back=True)
    [job] = claim(short)
    assert not job.may_start(short.send_bound)
    web_sender = WebSender(short)

    web_sender.offer([job])
    web_sender.finish()

    assert receiver.requests == [] and web_sender.slots.held() == 0
    delivery = Delivery.get()
    assert (delivery.attempts, delivery.locked_until) == (0, None)
    [again] = claim(settings_of(app))
    assert again.delivery_id == job.delivery_id


# --- no event under way twice at once, against the odds ------------------------

# Attempts end within 1.5 s; a lease is twice that plus a second, as the
# settings make it at least.
RACING = {"WEBHOOK_CONNECT_TIMEOUT": 0.5, "WEBHOOK_READ_TIMEOUT": 1.0,
          "WEBHOOK_LEASE_SECONDS": 2, "WEBHOOK_RETRY_SCHEDULE": "0,0,0,0,0",
          "WEBHOOK_BREAKER_THRESHOLD": 1000, "WORKER_POLL_INTERVAL": 0.1,
          "WORKER_THREADS": 8, "WEBHOOK_SENDS_PER_RECEIVER": 4}
LEASE = 2 * (RACING["WEBHOOK_CONNECT_TIMEOUT"] + RACING["WEBHOOK_READ_TIMEOUT"]) + 1


def worker_environment(database_url, settings, **extra):
    """The environment of a ``plantstore worker`` on the test's database."""
    return {**os.environ, **plantstore_env(database_url, **settings), **extra}


def undelivered():
    """How many deliveries are not delivered yet."""
    return Delivery.select().where(Delivery.status != Delivery.DELIVERED).count()


def assert_each_delivered_once_at_a_time(receiver):
    """Every delivery reached the receiver with a 2xx, and no webhook-id was
    under way twice at once."""
    assert overlapping_sends(receiver.requests) == set()
    reached = {got.headers["webhook-id"] for got, answer
               in zip(receiver.requests, receiver.answers) if answer.status == 200}
    assert {d.message_id for d in Delivery.select()} == reached
    assert undelivered() == 0


@pytest.mark.slow
@postgres_only
@pytest.mark.app_config(RACING)
def test_a_table_lock_held_past_every_lease_never_puts_an_event_under_way_twice(
        app, runner, alice, database_url, make_receiver, start_worker):
    receiver = make_receiver(Answer(200, delay=0.5))
    subscribe(runner, receiver.url)
    workers = [start_worker(worker_environment(database_url, RACING)) for _ in range(2)]
    for worker in workers:
        worker.wait_started()
    events = 150
    store_plants(app, range(events), give_back=True)
    receiver.wait_for(10, timeout=60)  # the drain is under way

    holder = psycopg2.connect(POSTGRES_URL)
    try:
        with holder, holder.cursor() as cursor:
            cursor.execute("LOCK TABLE delivery IN ACCESS EXCLUSIVE MODE")
            mid_drain = len(receiver.requests)
            time.sleep(LEASE + 2)  # claims and outcome writes wait; every lease runs out
    finally:
        holder.close()
    assert mid_drain < events, "the workers drained everything before the lock"

    wait_until(lambda: undelivered() == 0, timeout=180, interval=0.2,
               message=lambda: f"{undelivered()} deliveries still undelivered")
    for worker in workers:
        assert worker.stop() == 0, worker.output()[-3000:]
    assert_each_delivered_once_at_a_time(receiver)


# A retry is due 3 s (± 10 %) after a failure, by the database's clock.
SKEWED = {**RACING, "WEBHOOK_READ_TIMEOUT": 1.5, "WEBHOOK_RETRY_SCHEDULE": "3,0,0,0",
          "WORKER_THREADS": 4, "WEBHOOK_SENDS_PER_RECEIVER": 4}
RETRY_STEP = 3.0


def outcomes_logged(worker, kind):
    """The ids of the deliveries whose outcome ``kind`` this worker logged."""
    ids = set()
    for message in worker.messages():
        if message.startswith("delivery ") and f": {kind}" in message:
            ids.add(int(message.split()[1]))
    return ids


@pytest.mark.slow
@postgres_only
@pytest.mark.app_config(SKEWED)
@pytest.mark.parametrize("skew", ["+120s", "-120s"])
def test_workers_whose_clocks_disagree_share_the_queue_without_sending_an_event_twice_at_once(
        app, runner, alice, database_url, make_receiver, start_worker, skew):
    failed_once = set()
    lock = threading.Lock()

    def answer(got):
        """Slow; and the first attempt at each event fails, so each is retried."""
        with lock:
            first = got.headers["webhook-id"] not in failed_once
            failed_once.add(got.headers["webhook-id"])
        return Answer(503 if first else 200, delay=random.uniform(0.3, 0.5))

    receiver = make_receiver(answer)
    subscribe(runner, receiver.url)
    environment = worker_environment(database_url, SKEWED, LOG_LEVEL="debug")
    plain = start_worker(environment)
    skewed = start_worker({**environment, **wall_clock_off(skew)})
    for worker in (plain, skewed):
        worker.wait_started()
    started_at = [datetime.datetime.fromisoformat(worker.entries()[0]["ts"].rstrip("Z"))
                  for worker in (plain, skewed)]
    offset = (started_at[1] - started_at[0]).total_seconds()
    assert abs(offset - int(skew.rstrip("s"))) < 30, offset  # its clock is off indeed
    events = 40
    store_plants(app, range(events), give_back=True)

    # Each retry's due time as first seen, in seconds from the database's now.
    due_in = {}

    def watch():
        rows = database.execute_sql(
            f"SELECT id, extract(epoch FROM next_attempt_at - {clock.POSTGRES_NOW}) "
            "FROM delivery WHERE status = 'pending' AND attempts = 1").fetchall()
        for delivery_id, seconds in rows:
            due_in.setdefault(delivery_id, float(seconds))
        return undelivered() == 0
    wait_until(watch, timeout=180, interval=0.02,
               message=lambda: f"{undelivered()} deliveries still undelivered")
    for worker in (plain, skewed):
        worker.stop()
        assert worker.stopped_cleanly(), worker.output()[-3000:]

    assert_each_delivered_once_at_a_time(receiver)
    assert outcomes_logged(skewed, queue.DELIVERED), skewed.output()[-3000:]
    retried_by_skewed = outcomes_logged(skewed, queue.RETRY)
    assert retried_by_skewed, skewed.output()[-3000:]
    # Due a schedule's step after the failure, by the database's clock: a
    # worker's own clock would have put it 120 s off.
    seen = {delivery_id: due_in[delivery_id] for delivery_id in retried_by_skewed
            if delivery_id in due_in}
    assert seen, "no retry of the skewed worker was seen pending"
    assert all(0 < seconds <= RETRY_STEP * 1.1 + 0.1 for seconds in seen.values()), seen


# --- fair claims -----------------------------------------------------------------

def subscription_of(owner):
    """A new subscription of the user ``owner``; its id."""
    return Subscription.create(owner=User.get(User.name == owner), secret=new_secret(),
                               url="http://127.0.0.1:9/hook").id


@pytest.fixture
def backlog(app, alice, bob):
    """Alice's three subscriptions hold 30 due deliveries between them, all
    due before the 2 of Bob's one subscription."""
    owners = types.SimpleNamespace(
        alice=User.get(User.name == "alice").id, bob=User.get(User.name == "bob").id,
        alice_subscriptions=[subscription_of("alice") for _ in range(3)])
    store_plants(app, range(10), owner="alice", give_back=True)
    owners.bob_subscription = subscription_of("bob")
    store_plants(app, (100, 101), owner="bob", give_back=True)
    return owners


@postgres_only
@pytest.mark.parametrize("limit", [2, 4], ids=["part of the room", "the whole room"])
def test_a_claim_racing_another_takes_the_next_due_deliveries_not_nothing(app, runner, alice,
                                                                          limit):
    subscribe(runner, "http://127.0.0.1:9/hook")
    settings = settings_of(app)
    store_plants(app, range(10), give_back=True)
    claimed, holding, release = [], threading.Event(), threading.Event()

    def claim_and_hold_its_transaction_open():
        with database.connection_context(), database.atomic():
            claimed.extend(claim(settings, limit=limit, subscription_room=4))
            holding.set()
            release.wait(timeout=60)
    first = threading.Thread(target=claim_and_hold_its_transaction_open)
    first.start()
    try:
        assert holding.wait(timeout=30)
        # Its leases are not committed yet: this claim cannot see them, and
        # must skip the rows it holds, not give up.
        racing = claim(settings, limit=limit, subscription_room=4)
    finally:
        release.set()
        first.join(timeout=60)

    assert len(claimed) == limit and len(racing) == limit
    assert not {job.delivery_id for job in claimed} & {job.delivery_id for job in racing}


def per_owner(jobs):
    return collections.Counter(job.owner_id for job in jobs)


def per_subscription(jobs):
    return collections.Counter(job.subscription_id for job in jobs)


def test_a_claim_lets_owners_take_turns(app, backlog):
    jobs = claim(settings_of(app), limit=4, subscription_room=2)

    # Alice's 30 are the most overdue; Bob's take every other turn all the same.
    assert per_owner(jobs) == {backlog.alice: 2, backlog.bob: 2}


def test_a_claim_takes_no_more_than_each_receivers_room(app, backlog):
    first, *others = backlog.alice_subscriptions
    jobs = claim(settings_of(app), subscription_room=2, rooms={first: 1})

    assert per_subscription(jobs) == {first: 1, **dict.fromkeys(others, 2),
                                      backlog.bob_subscription: 2}


def test_a_claim_takes_no_more_than_each_owners_room(app, backlog):
    jobs = claim(settings_of(app), owner_room=3, owner_rooms={backlog.bob: 1})

    assert per_owner(jobs) == {backlog.alice: 3, backlog.bob: 1}


def open_breaker(subscription_id, probe_due=True):
    """Open the subscription's breaker, its probe due now (or a cooldown away)."""
    (Subscription.update(breaker_opened_at=clock.before(60), failure_streak=5,
                         breaker_probe_at=clock.before(1) if probe_due else clock.after(60))
     .where(Subscription.id == subscription_id).execute())


def test_a_receiver_whose_breaker_is_open_gives_a_claim_one_delivery_its_probe(app, backlog):
    settings = settings_of(app)
    broken = backlog.alice_subscriptions[0]
    open_breaker(broken)

    jobs = claim(settings)

    assert per_subscription(jobs)[broken] == 1
    assert per_owner(jobs) == {backlog.alice: 21, backlog.bob: 2}
    probe_at = Subscription.get_by_id(broken).breaker_probe_at
    assert Subscription.select().where(Subscription.id == broken,
                                       Subscription.breaker_probe_at > clock.now()).exists()
    queue.give_back(jobs)
    assert not per_subscription(claim(settings))[broken]  # the next probe is a cooldown away
    assert Subscription.get_by_id(broken).breaker_probe_at == probe_at


def test_only_one_of_two_claims_at_once_gets_an_open_breakers_probe(app, backlog):
    settings = settings_of(app)
    broken = backlog.alice_subscriptions[0]

    def claim_from_its_own_connection(both_ready, claimed):
        with database.connection_context():
            both_ready.wait(timeout=30)
            claimed.extend(claim(settings))

    for _ in range(10):
        Delivery.update(locked_until=None).execute()
        open_breaker(broken)
        both_ready, claimed = threading.Barrier(2), []
        threads = [threading.Thread(target=claim_from_its_own_connection,
                                    args=(both_ready, claimed)) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert per_subscription(claimed)[broken] == 1, claimed
        assert len({job.delivery_id for job in claimed}) == len(claimed)  # nothing twice


# --- a process's slots ----------------------------------------------------------

def job_of(owner, subscription):
    """What ``Slots`` reads of a job."""
    return types.SimpleNamespace(owner_key=owner, subscription_id=subscription)


def take_all(slots, owner, subscriptions=range(1000)):
    """Take slots for ``owner``'s jobs, one subscription each, until refused;
    how many it got."""
    taken = 0
    for subscription in subscriptions:
        if not slots.try_take(job_of(owner, (owner, subscription))):
            return taken
        taken += 1
    return taken


@given(total=st.integers(1, 64), per_receiver=st.integers(1, 128))
def test_the_per_receiver_cap_never_exceeds_the_total(total, per_receiver):
    slots = Slots(total, per_receiver)
    assert slots.per_receiver == min(per_receiver, total)
    assert slots.room().subscription_default <= total
    taken = 0
    while taken < 200 and slots.try_take(job_of(taken, "the one receiver")):
        taken += 1  # a new owner each time: only the receiver's cap stops it
    assert taken == min(per_receiver, total)


@given(total=st.integers(2, 64))
def test_an_owner_alone_may_take_all_slots_but_one(total):
    slots = Slots(total, total)
    assert take_all(slots, owner=1) == total - 1
    assert slots.held() == total - 1


@given(total=st.integers(2, 64), per_receiver=st.integers(1, 64))
def test_a_second_owner_always_finds_a_slot_while_the_first_holds_its_share(
        total, per_receiver):
    slots = Slots(total, per_receiver)
    take_all(slots, owner="a")  # as many as its share lets it, over many receivers
    assert slots.try_take(job_of("b", "b's receiver"))


def test_shares_shrink_as_owners_join_and_grow_as_they_leave():
    slots = Slots(9, 9)  # one kept for an owner holding none: 8 to share
    assert slots.room().owner_default == 8
    first = [job_of("a", n) for n in range(8)]
    assert [slots.try_take(job) for job in first[:3]] == [True] * 3
    assert slots.room().owners == {"a": 5} and slots.room().owner_default == 4
    assert slots.try_take(job_of("b", 0))  # a second owner: shares of 4
    assert slots.room().owners == {"a": 1, "b": 3}
    assert slots.try_take(first[3]) and not slots.try_take(first[4])
    assert slots.try_take(job_of("c", 0))  # a third: parts of 2, one more for two owners
    assert slots.room().owners == {"a": 0, "b": 2, "c": 2}
    assert not slots.try_take(first[4])  # a holds 4, over every share
    assert slots.try_take(job_of("b", 1)) and slots.try_take(job_of("b", 2))
    assert not slots.try_take(job_of("c", 1))  # 8 held: the one left is kept
    for job in (job_of("b", 0), job_of("b", 1), job_of("b", 2), job_of("c", 0)):
        slots.release(job)  # b and c are gone: a's share is 8 again
    assert slots.room().owners == {"a": 4}
    assert all(slots.try_take(job) for job in first[4:])
    assert slots.held() == 8 and not slots.try_take(first[0])


def take_in_turns(slots, owners):
    """Each of ``owners`` takes a slot in turn (a receiver of its own each
    time) until none may take more; how many each holds."""
    held = collections.Counter()
    while True:
        took = [owner for owner in owners
                if slots.try_take(job_of(owner, (owner, held[owner])))]
        if not took:
            return held
        held.update(took)


@given(total=st.integers(1, 64), owners=st.integers(1, 100))
def test_owners_with_work_hold_every_slot_but_the_kept_one_whatever_their_number(
        total, owners):
    slots = Slots(total, total)
    held = take_in_turns(slots, range(owners))
    assert slots.held() == (total if owners >= total else slots.shared)
    assert max(held.values()) - min(held.values()) <= 1  # the remainder, one each


def test_a_receivers_slots_and_its_owners_free_as_attempts_end():
    slots = Slots(4, 2)
    jobs = [job_of("a", "r"), job_of("a", "r"), job_of("a", "r")]
    assert [slots.try_take(job) for job in jobs] == [True, True, False]
    assert slots.room().subscriptions == {"r": 0}
    slots.release(jobs[0])
    assert slots.room().subscriptions == {"r": 1} and slots.try_take(jobs[2])
    assert slots.held() == 2


def test_a_slot_released_while_the_worker_claimed_is_not_waited_for_again():
    slots = Slots(4, 4)
    jobs = [job_of("a", "r"), job_of("a", "r")]
    assert all(slots.try_take(job) for job in jobs)
    room = slots.room()  # the worker reads its room, then claims ...
    slots.release(jobs[0])  # ... and an attempt ends meanwhile
    assert slots.wait_for_release(room.releases, timeout=10)  # at once, not at the next end
    assert not slots.wait_for_release(slots.room().releases, timeout=0.01)


def waiting_job_of(owner, subscription, lease_left=True):
    """What ``Slots`` reads of a job that may wait: ``lease_left`` says
    whether its lease still outlasts an attempt."""
    return types.SimpleNamespace(owner_key=owner, subscription_id=subscription,
                                 may_start=lambda send_bound: lease_left)


def test_a_worker_claims_twice_its_slots_more_to_wait_for_one():
    slots = Slots(4, 2, ahead=True)
    assert (slots.room().free, slots.room().subscription_default) == (12, 6)
    assert slots.room(for_waiting=False).free == 4
    jobs = [waiting_job_of("a", "r") for _ in range(7)]
    assert [slots.try_take(job) for job in jobs[:3]] == [True, True, False]
    assert [slots.wait(job) for job in jobs[2:]] == [True] * 4 + [False]  # r's 4 may wait
    assert slots.room().subscriptions == {"r": 0} and slots.room().free == 6
    assert slots.room(for_waiting=False).subscriptions == {"r": 0}
    assert slots.waiting_per_receiver == 4


@given(total=st.integers(1, 64), per_receiver=st.integers(1, 64), held=st.integers(0, 64))
def test_jobs_waiting_never_shrink_a_claim_below_the_free_slots(total, per_receiver, held):
    slots = Slots(total, per_receiver, ahead=True)
    taken = sum(slots.try_take(job_of(n, n)) for n in range(min(held, total)))
    receiver = 0
    while slots.wait(job_of("a", receiver)) or slots.wait(job_of("a", receiver + 1)):
        receiver += 1  # the waiting line full, over as many receivers as it takes
    assert slots.room().free >= total - taken


def test_a_web_process_lets_nothing_wait():
    slots = Slots(4, 2)
    assert slots.room().free == 4
    assert not slots.wait(waiting_job_of("a", "r"))


def test_an_ended_attempt_hands_its_slot_to_a_job_of_its_own_receiver_first():
    slots = Slots(2, 1, ahead=True)
    first_r, first_s = waiting_job_of("a", "r"), waiting_job_of("b", "s")
    assert slots.try_take(first_r) and slots.try_take(first_s)
    waiting_for_s, waiting_for_r = waiting_job_of("b", "s"), waiting_job_of("a", "r")
    assert slots.wait(waiting_for_s) and slots.wait(waiting_for_r)  # s's waits longer
    assert slots.release(first_r, take_next=True) == (waiting_for_r, [])
    assert slots.release(first_s, take_next=True) == (waiting_for_s, [])
    assert slots.held() == 2 and slots.waiting() == 0


def test_a_failed_attempt_gives_back_the_jobs_waiting_for_its_receiver():
    slots = Slots(2, 1, ahead=True)
    attempt, other = waiting_job_of("a", "r"), waiting_job_of("b", "s")
    assert slots.try_take(attempt) and slots.try_take(other)
    same = [waiting_job_of("a", "r")]
    elsewhere = waiting_job_of("a", "t")
    assert slots.wait(same[0]) and slots.wait(elsewhere)
    taken, stale = slots.release(attempt, failed=True, take_next=True)
    assert taken is elsewhere and stale == same  # the next claim sees the breaker
    assert slots.waiting() == 0


def test_a_waiting_job_whose_lease_ran_short_is_given_back_never_started():
    slots = Slots(9, 2, ahead=True)
    attempts = [waiting_job_of("a", "r"), waiting_job_of("a", "r")]
    assert all(slots.try_take(job) for job in attempts)
    short, fine = waiting_job_of("a", "r", lease_left=False), waiting_job_of("a", "r")
    assert slots.wait(short) and slots.wait(fine)
    assert slots.release(attempts[0], take_next=True) == (fine, [short])
    slots.release(attempts[1])
    late = waiting_job_of("a", "r", lease_left=False)
    assert slots.wait(late)
    assert slots.start_waiting() == ([], [late])
    assert slots.waiting() == 0


def test_an_owner_holding_its_share_beside_one_more_gets_no_slot_handed_over():
    slots = Slots(9, 9, ahead=True)  # 8 to share: 8 alone, 4 beside one more, 2 beside two
    a_jobs = [waiting_job_of("a", n) for n in range(6)]
    assert all(slots.try_take(job) for job in a_jobs)
    b_job = waiting_job_of("b", "s")
    assert slots.try_take(b_job)
    a_waiting, b_waiting = waiting_job_of("a", 0), waiting_job_of("b", "s")
    assert slots.wait(a_waiting) and slots.wait(b_waiting)
    # a's attempt ends: a holds 5, over its share beside one more owner, so
    # its slot goes to b's waiting job, not to a's (a's own receiver's)
    assert slots.release(a_jobs[0], take_next=True) == (b_waiting, [])
    assert slots.release(a_jobs[1], take_next=True) == (None, [])
    b_more = waiting_job_of("b", "s")
    assert slots.wait(b_more)
    # In the claiming loop b, under its share, starts first; then a, at its
    # share of 4, borrows what b leaves of its own; the ninth slot stays kept.
    assert slots.start_waiting() == ([b_more, a_waiting], [])
    assert slots.held() == 8


@given(total=st.integers(2, 64), idle=st.integers(0, 70), busy=st.integers(1, 10))
def test_the_claiming_loop_lends_idle_owners_room_to_the_owners_whose_jobs_wait(
        total, idle, busy):
    slots = Slots(total, total, ahead=True)
    for owner in range(idle):  # one attempt each under way, nothing more to send
        slots.try_take(waiting_job_of(("idle", owner), ("idle", owner)))
    busy_owners = [("busy", owner) for owner in range(busy)]
    while sum(slots.wait(waiting_job_of(owner, owner)) for owner in busy_owners):
        pass  # claimed in turns, until the waiting line is full
    started, _ = slots.start_waiting()
    assert slots.held() >= min(slots.shared, idle + slots.waiting() + len(started))
    assert slots.held() <= max(slots.shared, min(total, idle + busy))  # the kept one kept
    lent = collections.Counter(job.owner_key for job in started)
    if slots.waiting() and lent:  # the fewest held first: borrowers differ by one at most
        assert max(lent.values()) - min(lent[owner] for owner in busy_owners) <= 1


def test_a_stopping_worker_starts_no_waiting_job_and_gives_them_all_back():
    slots = Slots(1, 1, ahead=True)
    attempt, waiting = waiting_job_of("a", "r"), waiting_job_of("a", "r")
    assert slots.try_take(attempt) and slots.wait(waiting)
    assert slots.release(attempt, take_next=False) == (None, [])
    assert slots.give_up_waiting() == [waiting] and slots.waiting() == 0


def test_the_claiming_loop_waits_for_a_claims_worth_of_ended_attempts():
    slots = Slots(4, 4)
    jobs = [job_of("a", "r") for _ in range(3)]
    assert all(slots.try_take(job) for job in jobs)
    since = slots.room().releases
    slots.release(jobs[0])
    assert not slots.wait_for_release(since, timeout=0.01, count=2)
    slots.release(jobs[1])
    assert slots.wait_for_release(since, timeout=10, count=2)
