"""Running out of file descriptors is a worker's own trouble, never a
receiver's: a worker run with a low ``RLIMIT_NOFILE`` (soft and hard, so it
cannot raise it) serving more subscriptions than it has descriptors keeps
only as many connections as its budget allows and delivers every event,
charging nobody; one with too few descriptors for its attempts under way
gives what it cannot connect for back unsent (no attempt, no retry, no
breaker streak) and delivers it later. Kept connections idle too long are
closed."""
import collections
import resource
import subprocess

import pytest

from helpers import PLANTSTORE, REPO, plantstore_env, wait_until
from plantstore.db.models import Attempt, Delivery, Subscription
from plantstore.webhooks.config import settings_of
from plantstore.webhooks.sending import http_post
from plugins.webhooks import PATIENT_SENDS, Answer, store_plants, subscribe

SETTINGS = {**PATIENT_SENDS, "WEBHOOK_RETRY_SCHEDULE": "0,0",
            "WEBHOOK_BREAKER_THRESHOLD": 1}
"""A failure charged would show: retried, and its breaker opened at once."""
SUBSCRIPTIONS = 300
ROOMY_LIMIT = 160
"""More than the worker needs for its own files and attempts under way, far
fewer than a connection kept per subscription."""
TIGHT_LIMIT = 40
"""Fewer than its own files and 32 attempts under way at once."""


def subscribe_many(runner, url, count):
    """``count`` operator subscriptions to ``url`` (each its own connections)."""
    for _ in range(count):
        subscribe(runner, url)


def worker_once(database_url, limit, **settings):
    """``plantstore worker --once`` in a process whose descriptor limit,
    soft and hard, is ``limit``."""
    def low_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    env = {"PATH": "/usr/bin:/bin", **plantstore_env(database_url, **SETTINGS, **settings)}
    return subprocess.run([str(PLANTSTORE), "worker", "--once"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300, preexec_fn=low_limit)


def assert_delivered_once_each_charging_nobody(receiver):
    deliveries = list(Delivery.select())
    assert len(deliveries) == SUBSCRIPTIONS
    assert {(d.status, d.attempts) for d in deliveries} == {(Delivery.DELIVERED, 1)}
    attempts = list(Attempt.select())
    assert len(attempts) == SUBSCRIPTIONS, [a.error for a in attempts if a.error][:5]
    assert {a.status_code for a in attempts} == {200}
    assert not Subscription.select().where(
        (Subscription.failure_streak > 0) | Subscription.breaker_opened_at.is_null(False)
        | ~Subscription.is_active).exists()
    per_id = collections.Counter(r.headers["webhook-id"] for r in receiver.requests)
    assert len(per_id) == SUBSCRIPTIONS and set(per_id.values()) == {1}


@pytest.mark.slow
@pytest.mark.app_config(SETTINGS)
def test_a_worker_with_fewer_descriptors_than_subscriptions_keeps_within_them(
        app, alice, runner, database_url, make_receiver):
    receiver = make_receiver(Answer(200))
    subscribe_many(runner, receiver.url, SUBSCRIPTIONS)
    store_plants(app, [1], give_back=True)

    ran = worker_once(database_url, ROOMY_LIMIT)

    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "too many open files" not in ran.stderr.lower()
    assert_delivered_once_each_charging_nobody(receiver)


@pytest.mark.slow
@pytest.mark.app_config(SETTINGS)
def test_a_worker_out_of_descriptors_gives_deliveries_back_and_charges_nobody(
        app, alice, runner, database_url, make_receiver):
    receiver = make_receiver(Answer(200, delay=0.05))  # 32 attempts under way at once
    subscribe_many(runner, receiver.url, SUBSCRIPTIONS)
    store_plants(app, [1], give_back=True)

    ran = worker_once(database_url, TIGHT_LIMIT)

    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "no file descriptor left to connect" in ran.stderr, ran.stderr[-3000:]
    assert_delivered_once_each_charging_nobody(receiver)


@pytest.mark.app_config({**SETTINGS, "WEBHOOK_IDLE_CONNECTION_SECONDS": 1})
def test_an_idle_connection_is_closed_after_its_idle_time(app, alice, runner, make_receiver):
    receiver = make_receiver(Answer(200))
    subscribe_many(runner, receiver.url, 1)
    [job] = store_plants(app, [1])
    assert http_post.attempt(job, settings_of(app)).ok
    assert len(receiver.connections) == 1  # kept alive
    wait_until(lambda: not receiver.connections, 10, interval=0.05,
               message="the idle connection to be closed")
