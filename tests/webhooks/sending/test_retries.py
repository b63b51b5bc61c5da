"""Retries and what ends them: the schedule and its jitter, stable webhook-ids
with fresh timestamps, giving up, 410 Gone, Retry-After, and secret
rotation; plus how the schedule is read from the configuration."""
import datetime
import email.utils
import time

import pytest
from standardwebhooks.webhooks import WebhookVerificationError

from helpers import create_plant, setting
from plantstore import create_app
from plantstore.db.models import Attempt, Delivery, Subscription
from plantstore.settings import SettingError
from plantstore.webhooks.sending.http_post import parse_retry_after
from plugins.webhooks import (
    PATIENT_SENDS,
    RETRY_AT_ONCE,
    RETRY_EVERY_SECOND,
    Answer,
    run_worker,
    sleep_until,
    subscribe,
    verify,
    wait_for_attempts,
)

pytestmark = pytest.mark.app_config(RETRY_EVERY_SECOND)


def attempt_end(delivery):
    """When the last attempt at ``delivery`` ended."""
    attempt = (Attempt.select().where(Attempt.delivery == delivery.id)
               .order_by(Attempt.id.desc()).get())
    return attempt.started_at + datetime.timedelta(milliseconds=attempt.duration_ms)


def test_failures_retry_on_the_schedule_with_one_webhook_id_then_give_up(
        client, runner, alice, make_receiver):
    receiver = make_receiver(Answer(503, body=b"maintenance"))
    _, secret = subscribe(runner, receiver.url)

    create_plant(client, alice, 1)
    wait_for_attempts(1)
    assert run_worker(runner) == "nothing due"  # the retry is a second away
    for attempt in (2, 3):
        sleep_until(Delivery.get().next_attempt_at)
        assert run_worker(runner) == ("retry 1" if attempt == 2 else "failed 1")

    received = receiver.wait_for(3)
    assert len({got.headers["webhook-id"] for got in received}) == 1
    stamps = [int(got.headers["webhook-timestamp"]) for got in received]
    # Fresh on every attempt. The stamps are whole seconds and a jittered
    # retry may come 0.9 s after the one before, so two neighbours may share
    # a second; three attempts span at least 1.8 s, so the first and last
    # never do.
    assert stamps[0] <= stamps[1] <= stamps[2] and stamps[0] < stamps[2]
    for got in received:
        assert verify(secret, got) == {"id": 1, "name": "fern"}
    gaps = [b.at - a.at for a, b in zip(received, received[1:])]
    assert all(0.9 <= gap <= 5.0 for gap in gaps), gaps  # due after 1 s (± 10 %)
    delivery = Delivery.get()
    assert delivery.status == Delivery.FAILED and delivery.attempts == 3
    assert delivery.last_error == "HTTP 503: maintenance"
    sleep_until(delivery.next_attempt_at)
    assert run_worker(runner) == "nothing due"
    assert len(receiver.requests) == 3


# Twelve failing attempts at once: neither the caps nor the breaker may leave
# any of them to the workers.
@pytest.mark.app_config({**RETRY_EVERY_SECOND, "WEBHOOK_BREAKER_THRESHOLD": 100,
                         "WEBHOOK_SENDS_PER_PROCESS": 16, "WEBHOOK_SENDS_PER_RECEIVER": 16})
def test_scheduled_delays_are_jittered(client, runner, alice, make_receiver):
    receiver = make_receiver(Answer(500))
    subscribe(runner, receiver.url)
    for plant_id in range(12):
        create_plant(client, alice, plant_id)
    wait_for_attempts(12)
    delays = [(delivery.next_attempt_at - attempt_end(delivery)).total_seconds()
              for delivery in Delivery.select()]
    # 1 s ± 10 %, counted from the end of the attempt; the outcome is
    # written a moment after that, which can only add to the delay.
    assert all(0.9 <= delay <= 1.1 + 0.5 for delay in delays), delays
    assert max(delays) - min(delays) > 0.01, delays


@pytest.mark.app_config({**RETRY_EVERY_SECOND, "WORKER_BATCH_SIZE": 1, "WORKER_THREADS": 1})
def test_a_410_disables_the_subscription_and_fails_its_waiting_deliveries(
        client, runner, alice, make_receiver):
    gone = make_receiver(Answer(500))
    other = make_receiver()
    gone_id, _ = subscribe(runner, gone.url)
    subscribe(runner, other.url)
    create_plant(client, alice, 1)
    create_plant(client, alice, 2)
    wait_for_attempts(4)

    gone.answer = Answer(410, body=b"unsubscribed")
    sleep_until(max(d.next_attempt_at for d in Delivery.select()))
    assert run_worker(runner) == "gone 1"

    subscription = Subscription.get_by_id(gone_id)
    assert subscription.is_active is False
    assert "410" in subscription.disabled_reason
    gone_deliveries = Delivery.select().where(Delivery.subscription == gone_id)
    assert {d.status for d in gone_deliveries} == {Delivery.FAILED}
    create_plant(client, alice, 3)
    other.wait_for(3)
    assert len(gone.requests) == 3  # two creates and the one 410: nothing since
    assert Delivery.select().where(Delivery.subscription == gone_id).count() == 2


@pytest.mark.app_config({**PATIENT_SENDS, "WEBHOOK_RETRY_SCHEDULE": "0,3"})
@pytest.mark.parametrize("status, retry_after, expected", [
    (503, "2", 2.0),
    (429, "http-date+3", 3.0),  # whole seconds: 2 to 3 s from now
    (503, "99999", 3.0),  # bounded by the schedule's longest step
])
def test_retry_after_on_429_and_503_postpones_the_next_attempt(
        client, runner, alice, make_receiver, status, retry_after, expected):
    if retry_after.startswith("http-date"):
        retry_after = email.utils.formatdate(time.time() + 3, usegmt=True)
    receiver = make_receiver(Answer(status, headers={"Retry-After": retry_after}))
    subscribe(runner, receiver.url)

    create_plant(client, alice, 1)
    wait_for_attempts(1)

    delivery = Delivery.get()
    attempt = Attempt.get()
    wait = (delivery.next_attempt_at - attempt.started_at).total_seconds()
    assert expected - 1.1 <= wait <= expected + 0.5, wait
    assert run_worker(runner) == "nothing due"  # a 0 s schedule step alone would retry now
    assert len(receiver.requests) == 1


@pytest.mark.app_config(RETRY_AT_ONCE)
def test_retry_after_is_ignored_on_other_statuses(client, runner, alice, make_receiver):
    receiver = make_receiver(Answer(500, headers={"Retry-After": "30"}))
    subscribe(runner, receiver.url)
    create_plant(client, alice, 1)
    wait_for_attempts(1)
    assert run_worker(runner) == "failed 1"


def test_after_a_rotation_both_secrets_sign_until_the_overlap_ends(
        client, runner, alice, make_receiver):
    receiver = make_receiver()
    subscription_id, old_secret = subscribe(runner, receiver.url)
    rotated = runner.invoke(args=["webhooks", "rotate-secret", str(subscription_id)])
    assert rotated.exit_code == 0, rotated.output
    new_secret = rotated.stdout.strip()
    assert new_secret.startswith("whsec_") and new_secret != old_secret

    create_plant(client, alice, 1)
    [got] = receiver.wait_for(1)
    assert len(got.headers["webhook-signature"].split(" ")) == 2
    assert verify(old_secret, got) == verify(new_secret, got) == {"id": 1, "name": "fern"}

    Subscription.update(retired_secrets="[]").execute()  # the overlap ended
    create_plant(client, alice, 2)
    got = receiver.wait_for(2)[1]
    assert len(got.headers["webhook-signature"].split(" ")) == 1
    assert verify(new_secret, got) == {"id": 2, "name": "fern"}
    with pytest.raises(WebhookVerificationError):
        verify(old_secret, got)


@pytest.mark.app_config({**PATIENT_SENDS, "WEBHOOK_SECRET_OVERLAP_HOURS": 0})
def test_with_no_overlap_a_rotated_secret_stops_signing_at_once(
        client, runner, alice, make_receiver):
    receiver = make_receiver()
    subscription_id, old_secret = subscribe(runner, receiver.url)
    new_secret = runner.invoke(
        args=["webhooks", "rotate-secret", str(subscription_id)]).stdout.strip()
    create_plant(client, alice, 1)
    [got] = receiver.wait_for(1)
    assert verify(new_secret, got) == {"id": 1, "name": "fern"}
    with pytest.raises(WebhookVerificationError):
        verify(old_secret, got)


RETRY_SCHEDULE = setting("WEBHOOK_RETRY_SCHEDULE")


@pytest.mark.parametrize("raw, expected", [
    ("5,300,1800", (5.0, 300.0, 1800.0)),
    (" 5 , 300 ", (5.0, 300.0)),
    (5, (5.0,)),
    (0.5, (0.5,)),
    ([1, 2], (1.0, 2.0)),
    ("[1, 2]", (1.0, 2.0)),
    ("", ()),
])
def test_the_retry_schedule_is_read_from_any_shape_the_environment_gives(raw, expected):
    assert RETRY_SCHEDULE.read(raw) == expected


@pytest.mark.parametrize("raw", ["5,soon", "-1,5", True, {"a": 1}])
def test_a_malformed_retry_schedule_is_refused(raw):
    with pytest.raises(SettingError, match="WEBHOOK_RETRY_SCHEDULE"):
        RETRY_SCHEDULE.read(raw)


def test_the_schedule_and_timeouts_come_from_plantstore_environment_variables(
        monkeypatch, database_url):
    monkeypatch.setenv("PLANTSTORE_WEBHOOK_RETRY_SCHEDULE", "7")
    monkeypatch.setenv("PLANTSTORE_WEBHOOK_CONNECT_TIMEOUT", "1.5")
    settings = create_app({"DATABASE_URL": database_url}).extensions["plantstore.webhooks"]
    assert settings.retry_schedule == (7.0,)
    assert settings.connect_timeout == 1.5
    assert settings.lease_seconds >= 2 * (1.5 + 5.0)


def test_a_malformed_webhook_setting_stops_the_app_from_starting(database_url):
    with pytest.raises(SettingError, match="WEBHOOK_READ_TIMEOUT"):
        create_app({"DATABASE_URL": database_url, "WEBHOOK_READ_TIMEOUT": "soon"})


def test_retry_after_is_read_as_seconds_or_an_http_date():
    now = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)
    assert parse_retry_after("120", now) == 120.0
    assert parse_retry_after("Thu, 01 Jan 2026 12:01:00 GMT", now) == 60.0
    assert parse_retry_after("Thu, 01 Jan 2026 11:00:00 GMT", now) == 0.0
    assert parse_retry_after("soon", now) is None
    assert parse_retry_after("", now) is None


def test_a_retry_after_of_other_digits_than_ascii_is_ignored():
    now = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.timezone.utc)
    for value in ("²", "١٢٠", "１２", "12.5", "-3", "Thu, 99 Foo 2026 99:99:99 GMT"):
        assert parse_retry_after(value, now) is None, value


def test_an_attempt_answered_with_an_unreadable_retry_after_keeps_its_status_code(
        client, runner, alice, make_receiver):
    receiver = make_receiver(Answer(503, headers={"Retry-After": "²"}))
    subscribe(runner, receiver.url)

    create_plant(client, alice, 1)
    wait_for_attempts(1)

    attempt = Attempt.get()
    assert attempt.status_code == 503
    delivery = Delivery.get()
    assert delivery.status == Delivery.PENDING and delivery.last_error.startswith("HTTP 503")
