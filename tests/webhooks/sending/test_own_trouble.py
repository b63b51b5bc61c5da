"""A process's own trouble is never the receiver's: a worker that holds no
key for its subscriptions' secrets (another process re-encrypted them
under a new key while it ran) gives every job back unsent — no attempt
counted, no breaker moved, one line said, ``/metrics`` counting — and a
process that holds the key delivers them all."""
import dataclasses
import logging
import time

import pytest
from cryptography.fernet import Fernet

from helpers import plantstore_env, run_plantstore
from plantstore.db import database, database_from_url
from plantstore.db.models import Attempt, Delivery, Subscription
from plantstore.housekeeping.runner import Housekeeping
from plantstore.observability import metrics
from plantstore.webhooks.config import settings_of
from plantstore.webhooks.sending import attempt, own_trouble
from plantstore.webhooks.sending.worker import Worker
from plugins.webhooks import PATIENT_SENDS, Answer, store_plants, verify

KEY_OLD, KEY_NEW = Fernet.generate_key().decode(), Fernet.generate_key().decode()
SETTINGS = {**PATIENT_SENDS, "WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
            "WEBHOOK_RETRY_SCHEDULE": "0,0", "WEBHOOK_BREAKER_THRESHOLD": 1}
PLANTS = 3 * 10


def plantstore(database_url, *args, keys):
    env = {"PATH": "/usr/bin:/bin", **plantstore_env(database_url, ENCRYPTION_KEYS=keys,
                                                     **SETTINGS)}
    result = run_plantstore(*args, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    return result


@pytest.fixture(autouse=True)
def avoidance_of_this_test_only(monkeypatch):
    """The subscriptions a worker here leaves to others are forgotten after
    the test: the next test's subscriptions reuse their ids."""
    monkeypatch.setattr(own_trouble, "_avoided", {})


def not_sent(reason):
    return metrics.NOT_SENT.labels(reason=reason)._value.get()


@pytest.mark.slow
@pytest.mark.app_config({**SETTINGS, "ENCRYPTION_KEYS": KEY_OLD})
def test_a_worker_without_the_key_gives_jobs_back_unsent_and_moves_no_breaker(
        app, client, runner, alice, database_url, make_receiver, caplog):
    receiver = make_receiver(Answer(200))
    secrets = []
    for _ in range(3):
        result = runner.invoke(args=["webhooks", "add", receiver.url])
        assert result.exit_code == 0, result.output
        secrets.append(result.stdout.split('"secret": "')[1].split('"')[0])
    store_plants(app, range(PLANTS // 3), owner="alice", give_back=True)
    # another process re-encrypts every secret under a key this one lacks
    plantstore(database_url, "keys", "reencrypt", keys=f"{KEY_NEW},{KEY_OLD}")
    before = not_sent("no key")

    caplog.set_level(logging.ERROR)
    Worker(settings_of(app), Housekeeping()).run_once()

    assert receiver.requests == []
    assert Attempt.select().count() == 0
    assert {(d.status, d.attempts) for d in Delivery.select()} == {(Delivery.PENDING, 0)}
    assert not Delivery.select().where(Delivery.locked_until.is_null(False)).exists()
    for subscription in Subscription.select():
        assert subscription.is_active and subscription.failure_streak == 0
        assert subscription.breaker_opened_at is None
    said = [r.getMessage() for r in caplog.records if "cannot send" in r.getMessage()]
    assert len(said) == 1 and "no key" in said[0], said
    assert not_sent("no key") - before >= 3  # each subscription's first job, at least

    # a process holding the new key delivers every one of them
    plantstore(database_url, "worker", "--once", keys=KEY_NEW)
    assert len(receiver.requests) == PLANTS
    for received in receiver.requests:
        assert any(_verifies(secret, received) for secret in secrets)
    assert {d.status for d in Delivery.select()} == {Delivery.DELIVERED}


def _verifies(secret, received):
    try:
        verify(secret, received)
    except Exception:
        return False
    return True


class GivenBack:
    """The attempt's outcome writer, recording what it was handed."""

    def __init__(self):
        self.given_back, self.outcomes = [], []

    def give_back(self, job):
        self.given_back.append(job)

    def put(self, job, result):
        self.outcomes.append((job, result))


@pytest.mark.app_config(SETTINGS)
def test_a_job_whose_subscription_cannot_be_read_is_given_back_as_the_databases_trouble(
        app, runner, alice, caplog):
    assert runner.invoke(args=["webhooks", "add", "http://127.0.0.1:9/hook"]).exit_code == 0
    [job] = store_plants(app, [1])
    stale = dataclasses.replace(job, leased_at=time.monotonic() - 10 * attempt.FRESH_SECONDS)
    writer = GivenBack()
    before = {reason: not_sent(reason) for reason in ("database unavailable",
                                                       "configuration changed")}
    bound = database.obj
    database.initialize(database_from_url("sqlite:////nonexistent-directory/plantstore.db"))
    try:
        with caplog.at_level(logging.ERROR):
            for _ in range(3):
                assert attempt.attempt_and_put(stale, settings_of(app), writer) is False
    finally:
        database.initialize(bound)

    assert writer.given_back == [stale] * 3 and writer.outcomes == []
    assert not_sent("database unavailable") - before["database unavailable"] == 3
    assert not_sent("configuration changed") == before["configuration changed"]
    said = [r.getMessage() for r in caplog.records if "gives them back unsent" in r.getMessage()]
    assert len(said) <= 1  # once per reason and process: maybe said by an earlier test
    assert all("a subscription could not be read: unable to open database file" in line
               for line in said)
    assert Attempt.select().count() == 0
