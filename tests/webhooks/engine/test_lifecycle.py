"""The delivery lifecycle, for API and CLI subscriptions alike: disabled after
sustained failure, retention, test events, recovery, and the history of
rotated-out secrets. The clock is moved by rewriting stored times."""
import datetime
import json
import os
import subprocess
import sys
import threading
import time

import psycopg2
import pytest
from standardwebhooks.webhooks import WebhookVerificationError

from helpers import (
    PLANTSTORE,
    POSTGRES_URL,
    bearer,
    create_plant,
    plantstore_env,
    setting,
    skew_process_clock,
    wait_until,
    wall_clock_off,
)
from plantstore import db
from plantstore.db import clock
from plantstore.db.models import Attempt, Delivery, Subscription, utcnow
from plantstore.housekeeping.runner import Housekeeping
from plantstore.webhooks.config import settings_of
from plantstore.webhooks.engine import queue, retention, store
from plantstore.webhooks.engine.store import postgres as postgres_store
from plantstore.webhooks.receivers import secrets as receiver_secrets
from plantstore.webhooks.sending.worker import Worker
from plantstore.webhooks.subscriptions import secrets
from plugins.webhooks import Answer, store_plants, subscribe, verify, wait_for_attempts

HOUR = datetime.timedelta(hours=1)


@pytest.fixture
def app_config():
    return {"WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8", "WEBHOOK_RETRY_SCHEDULE": "0,0,0",
            "WEBHOOK_DISABLE_AFTER_HOURS": 2}


def invoke(runner, *args):
    return runner.invoke(args=list(args))


def age_subscription(subscription_id, hours, succeeded_hours_ago=None):
    """Pretend the subscription was made (or enabled) ``hours`` ago and last
    succeeded ``succeeded_hours_ago``."""
    now = utcnow()
    (Subscription.update(
        enabled_at=now - hours * HOUR, created_at=now - hours * HOUR,
        last_success_at=(None if succeeded_hours_ago is None
                         else now - succeeded_hours_ago * HOUR))
     .where(Subscription.id == subscription_id).execute())


def disabled_metric(client, reason):
    sample = f'plantstore_webhook_subscriptions_disabled_total{{reason="{reason}"}}'
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(sample):
            return float(line.split()[-1])
    return 0.0


@pytest.mark.slow
@pytest.mark.parametrize("made_by", ["cli", "api"])
def test_a_subscription_failing_for_longer_than_the_threshold_is_disabled(
        client, runner, alice, make_receiver, caplog, made_by):
    receiver = make_receiver(answer=Answer(500))
    if made_by == "cli":
        subscription_id, _ = subscribe(runner, receiver.url)
    else:
        subscription_id = client.post("/webhooks", json={"url": receiver.url},
                                      headers=bearer(alice)).get_json()["id"]
    age_subscription(subscription_id, hours=3, succeeded_hours_ago=2.5)
    counted = disabled_metric(client, "failing")

    create_plant(client, alice, 1)
    wait_for_attempts(1)

    subscription = Subscription.get_by_id(subscription_id)
    assert subscription.is_active is False and subscription.disabled_at is not None
    assert "no successful delivery for 2 h" in subscription.disabled_reason
    assert Delivery.get().status == Delivery.FAILED
    assert disabled_metric(client, "failing") == counted + 1
    assert any("disabled" in record.getMessage() for record in caplog.records)
    listed = invoke(runner, "webhooks", "list").stdout
    assert "disabled (no successful delivery for 2 h" in listed
    if made_by == "api":
        shown = client.get(f"/webhooks/{subscription_id}", headers=bearer(alice)).get_json()
        assert shown["active"] is False and "2 h" in shown["disabled_reason"]
    create_plant(client, alice, 2)
    assert Delivery.select().count() == 1  # nothing more is queued for it


@pytest.mark.slow
@pytest.mark.parametrize("hours, succeeded_hours_ago", [
    (1, None),     # failing, but not for long enough since it was made
    (3, 1),        # succeeded recently
])
def test_a_subscription_within_the_threshold_stays_active(
        client, runner, alice, make_receiver, hours, succeeded_hours_ago):
    receiver = make_receiver(answer=Answer(500))
    subscription_id, _ = subscribe(runner, receiver.url)
    age_subscription(subscription_id, hours, succeeded_hours_ago)

    create_plant(client, alice, 1)
    wait_for_attempts(1)

    assert Subscription.get_by_id(subscription_id).is_active is True


@pytest.mark.slow
def test_a_success_is_remembered_and_enabling_restarts_the_clock(
        client, runner, alice, make_receiver):
    receiver = make_receiver()
    subscription_id, _ = subscribe(runner, receiver.url)
    create_plant(client, alice, 1)
    wait_for_attempts(1)
    assert Subscription.get_by_id(subscription_id).last_success_at is not None
    age_subscription(subscription_id, hours=5, succeeded_hours_ago=4)
    receiver.answer = Answer(500)
    create_plant(client, alice, 2)
    wait_for_attempts(2)
    assert Subscription.get_by_id(subscription_id).is_active is False

    assert invoke(runner, "webhooks", "enable", str(subscription_id)).exit_code == 0
    create_plant(client, alice, 3)
    wait_for_attempts(3)

    assert Subscription.get_by_id(subscription_id).is_active is True


def seed_deliveries(subscription_id, days_old):
    """One delivered, one failed and one pending delivery, each with an
    attempt, made ``days_old`` days ago; their ids."""
    made = utcnow() - datetime.timedelta(days=days_old)
    ids = []
    with db.database.atomic():
        for status in (Delivery.DELIVERED, Delivery.FAILED, Delivery.PENDING):
            delivery = Delivery.create(
                subscription=subscription_id, message_id=f"msg_{status}_{days_old}",
                event_type="plant.created", payload="{}", status=status, created_at=made)
            Attempt.create(delivery=delivery, duration_ms=1, status_code=500)
            ids.append(delivery.id)
    return ids


def remaining():
    return sorted(d.message_id for d in Delivery.select())


def test_deliveries_purge_deletes_finished_deliveries_past_retention_but_never_pending(
        runner):
    subscription_id, _ = subscribe(runner, "http://127.0.0.1:9/hook")
    seed_deliveries(subscription_id, days_old=40)
    seed_deliveries(subscription_id, days_old=10)

    result = invoke(runner, "deliveries", "purge")

    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "deleted 2 deliveries older than 30 days"
    assert remaining() == ["msg_delivered_10", "msg_failed_10", "msg_pending_10",
                           "msg_pending_40"]
    assert Attempt.select().count() == 4
    result = invoke(runner, "deliveries", "purge", "--older-than", "5")
    assert result.stdout.strip() == "deleted 2 deliveries older than 5 days"
    assert remaining() == ["msg_pending_10", "msg_pending_40"]


@pytest.mark.parametrize("days", ["0", "-1", "x", "99999"])
def test_deliveries_purge_refuses_a_bad_age(runner, days):
    assert invoke(runner, "deliveries", "purge", "--older-than", days).exit_code == 2


def test_the_worker_purges_past_retention_in_small_batches(app, runner, monkeypatch):
    monkeypatch.setattr(retention, "PURGE_BATCH", 1)
    subscription_id, _ = subscribe(runner, "http://127.0.0.1:9/hook")
    seed_deliveries(subscription_id, days_old=40)
    with app.app_context():
        worker = Worker(settings_of(app), Housekeeping())
        thread = threading.Thread(target=worker.run_forever)
        thread.start()
        try:
            wait_until(lambda: len(remaining()) <= 1, timeout=20, interval=0.05,
                       message="the purge")
        finally:
            worker.stop()
            thread.join(timeout=20)
    assert remaining() == ["msg_pending_40"]


@pytest.mark.slow
def test_webhooks_test_sends_a_signed_example_event_now(runner, make_receiver):
    receiver = make_receiver()
    subscription_id, secret = subscribe(runner, receiver.url)

    result = invoke(runner, "webhooks", "test", str(subscription_id))

    assert result.exit_code == 0, result.output
    [got] = receiver.wait_for(1)
    assert result.stdout.strip() == f"delivered {got.headers['webhook-id']}"
    assert set(verify(secret, got)) == {"id", "name", "tag"}
    delivery = Delivery.get()
    assert (delivery.event_type, delivery.status) == ("plant.test", "delivered")


@pytest.mark.slow
def test_webhooks_test_says_when_the_receiver_failed(runner, make_receiver):
    receiver = make_receiver(answer=Answer(500, body=b"nope"))
    subscription_id, _ = subscribe(runner, receiver.url)

    result = invoke(runner, "webhooks", "test", str(subscription_id))

    assert result.exit_code == 1
    assert "failed (HTTP 500: nope)" in result.stderr


class TestRecover:
    @pytest.fixture
    def app_config(self):
        return {"WEBHOOK_RETRY_SCHEDULE": ""}  # the first failure is final

    @pytest.mark.slow
    def test_deliveries_recover_queues_failed_ones_since_the_time_with_their_ids(
            self, client, runner, alice, make_receiver):
        receiver = make_receiver(answer=Answer(500))
        subscription_id, _ = subscribe(runner, receiver.url)
        create_plant(client, alice, 1)
        create_plant(client, alice, 2)
        ids = [r.headers["webhook-id"] for r in receiver.wait_for(2)]
        wait_for_attempts(2)
        old = Delivery.get(Delivery.message_id == ids[0])
        Delivery.update(created_at=utcnow() - 48 * HOUR).where(Delivery.id == old.id).execute()
        receiver.answer = Answer(200)
        since = (datetime.datetime.now(datetime.timezone.utc) - 24 * HOUR).isoformat()

        result = invoke(runner, "deliveries", "recover", "--subscription",
                        str(subscription_id), "--since", since)

        assert result.exit_code == 0, result.output
        assert result.stdout.strip() == (
            f"queued 1 failed deliveries of subscription {subscription_id} again")
        assert invoke(runner, "worker", "--once").exit_code == 0
        assert receiver.wait_for(3)[2].headers["webhook-id"] == ids[1]
        assert Delivery.get(Delivery.id == old.id).status == Delivery.FAILED


@pytest.mark.parametrize("since", ["yesterday", "2026-01-01T00:00:00", ""])
def test_deliveries_recover_needs_a_time_with_an_offset(runner, since):
    subscription_id, _ = subscribe(runner, "http://127.0.0.1:9/hook")
    result = invoke(runner, "deliveries", "recover", "--subscription",
                    str(subscription_id), "--since", since)
    assert result.exit_code == 2 and "--since" in result.stderr


def signatures(received):
    return received.headers["webhook-signature"].split(" ")


@pytest.mark.slow
def test_every_rotated_out_secret_signs_until_its_own_overlap_ends(
        client, runner, alice, make_receiver):
    receiver = make_receiver()
    subscription_id, secret_a = subscribe(runner, receiver.url)          # A
    secret_b = invoke(runner, "webhooks", "rotate-secret", str(subscription_id)).stdout.strip()
    secret_c = client.post(f"/webhooks/{subscription_id}/rotate-secret",  # C, as admin
                           headers=bearer(_admin_token(client))).get_json()["secret"]

    create_plant(client, alice, 1)

    [got] = receiver.wait_for(1)
    assert len(signatures(got)) == 3
    for secret in (secret_a, secret_b, secret_c):
        assert verify(secret, got) == {"id": 1, "name": "fern"}

    # A's overlap ends first (it was rotated out first): once the housekeeping
    # has seen it end, B and C go on signing without A.
    end_overlap(subscription_id, secret_a, -HOUR)
    run_housekeeping(client.application)
    create_plant(client, alice, 2)
    got = receiver.wait_for(2)[1]
    assert len(signatures(got)) == 2
    assert verify(secret_b, got) == verify(secret_c, got)
    with pytest.raises(WebhookVerificationError):
        verify(secret_a, got)


def end_overlap(subscription_id, secret, from_database_now):
    """Make ``secret``'s overlap end ``from_database_now`` (a timedelta) from
    the database's time."""
    retired = json.loads(Subscription.get_by_id(subscription_id).retired_secrets)
    for entry in retired:
        if entry["secret"] == secret:
            entry["expires_at"] = (clock.read() + from_database_now).isoformat()
    Subscription.update(retired_secrets=json.dumps(retired)).execute()


def run_housekeeping(app):
    """One run of the worker's housekeeping, as a worker makes it."""
    Housekeeping().run_if_due(settings_of(app), force=True)


postgres_clock_only = pytest.mark.skipif(
    not POSTGRES_URL, reason="SQLite serves one host: its clock is the process's")


@postgres_clock_only
@pytest.mark.parametrize("process_clock_off_by, overlap_ends_in, still_signs", [
    pytest.param(2 * HOUR, HOUR, True, id="process ahead, overlap ends in an hour"),
    pytest.param(-2 * HOUR, -HOUR, False, id="process behind, overlap ended an hour ago"),
])
def test_an_overlap_ends_by_the_databases_clock_whatever_the_senders(
        client, runner, alice, make_receiver, monkeypatch, process_clock_off_by,
        overlap_ends_in, still_signs):
    receiver = make_receiver()
    subscription_id, old_secret = subscribe(runner, receiver.url)
    new_secret = invoke(runner, "webhooks", "rotate-secret", str(subscription_id)).stdout.strip()
    end_overlap(subscription_id, old_secret, overlap_ends_in)
    skew_process_clock(monkeypatch, process_clock_off_by)

    run_housekeeping(client.application)
    create_plant(client, alice, 1)

    [got] = receiver.wait_for(1)
    assert verify(new_secret, got) == {"id": 1, "name": "fern"}
    assert len(signatures(got)) == (2 if still_signs else 1)
    if still_signs:
        assert verify(old_secret, got) == {"id": 1, "name": "fern"}


def _admin_token(client):
    from plantstore.db.models import User
    from plantstore.web.auth import issue_token
    with client.application.app_context(), db.database.atomic():
        user, _ = User.get_or_create(name="root", defaults={"is_admin": True})
        return issue_token(user)[1]


def test_rotations_beyond_the_cap_drop_the_secret_that_would_stop_first(runner):
    subscription_id, first = subscribe(runner, "http://127.0.0.1:9/hook")
    outputs = [invoke(runner, "webhooks", "rotate-secret", str(subscription_id))
               for _ in range(secrets.MAX_RETIRED_SECRETS + 1)]

    assert all(result.exit_code == 0 for result in outputs)
    assert "stopped signing early" not in outputs[-2].stderr
    assert (f"1 older secret(s) stopped signing early: at most "
            f"{secrets.MAX_RETIRED_SECRETS}") in outputs[-1].stderr
    subscription = Subscription.get_by_id(subscription_id)
    signing = receiver_secrets.signing_secrets(subscription)
    assert len(signing) == secrets.MAX_RETIRED_SECRETS + 1
    assert first not in signing
    assert signing[0] == outputs[-1].stdout.strip()


@postgres_clock_only
def test_a_host_whose_clock_is_off_writes_a_subscriptions_times_by_the_databases(
        database_url):
    """A subscription's creation (against which how long it has failed is
    judged) and a rotated-out secret's overlap are the database's time,
    whatever the clock of the host that wrote them: here hours behind."""
    env = {**os.environ, **plantstore_env(database_url), **wall_clock_off("-6h")}
    their_clock = subprocess.run([sys.executable, "-c", "import time; print(time.time())"],
                                 env=env, capture_output=True, text=True, timeout=60, check=True)
    assert abs(time.time() - float(their_clock.stdout) - 6 * 3600) < 60  # off indeed
    added = subprocess.run([str(PLANTSTORE), "webhooks", "add", "http://127.0.0.1:9/hook"],
                           env=env, capture_output=True, text=True, timeout=60, check=True)
    subscription_id = json.loads(added.stdout)["id"]
    subprocess.run([str(PLANTSTORE), "webhooks", "rotate-secret", str(subscription_id)],
                   env=env, capture_output=True, text=True, timeout=60, check=True)

    [(age, overlap_left)] = db.database.execute_sql(
        "SELECT extract(epoch FROM (now() AT TIME ZONE 'UTC') - created_at), "
        "extract(epoch FROM (retired_secrets::json->0->>'expires_at')::timestamp "
        "                   - (now() AT TIME ZONE 'UTC')) "
        "FROM subscription WHERE id = %s", (subscription_id,)).fetchall()
    overlap = setting("WEBHOOK_SECRET_OVERLAP_HOURS").default * 3600
    assert 0 <= age < 60
    assert overlap - 60 < overlap_left <= overlap


def test_housekeeping_fails_deliveries_left_pending_on_a_disabled_subscription(
        app, runner, alice):
    """What a create racing a disabling leaves (a pending delivery of a
    subscription already disabled) is failed as disabling fails it; another
    subscription's pending delivery is left alone."""
    stopped, _ = subscribe(runner, "http://127.0.0.1:9/stopped")
    kept, _ = subscribe(runner, "http://127.0.0.1:9/kept")
    queue.disable(stopped, queue.GONE, "the receiver answered 410 Gone")
    stray = store.current().insert_delivery(stopped, "plant.created", '{"id": 1}',
                                            lease_seconds=None)
    store_plants(app, [1], give_back=True)

    run_housekeeping(app)

    assert Delivery.get_by_id(stray).status == Delivery.FAILED
    assert Delivery.get_by_id(stray).last_error == (
        "subscription disabled: the receiver answered 410 Gone")
    assert [d.status for d in Delivery.select().where(Delivery.subscription == kept)] == [
        Delivery.PENDING]


@pytest.mark.skipif(not POSTGRES_URL, reason="SQLite's writers take turns: a create "
                                             "never reads a subscription being disabled")
def test_a_plant_stored_while_its_subscription_is_being_disabled_is_not_left_pending(
        app, runner, alice):
    """Another host disables a subscription (its row updated, its waiting
    deliveries failed, not yet committed) while a create stores a plant: the
    create's statement read the subscription as active and does not wait
    for its row, so its delivery is pending once both commit. Housekeeping
    fails it, as the disabling would have."""
    subscription_id, _ = subscribe(runner, "http://127.0.0.1:9/hook")
    reason = "the receiver answered 410 Gone"
    failed_because = f"subscription disabled: {reason}"
    disabling = psycopg2.connect(POSTGRES_URL)
    try:
        with disabling.cursor() as cursor:  # a transaction, left open
            cursor.execute(postgres_store.QUERIES["stop_subscription"],
                           {"id": subscription_id, "reason": reason})
            cursor.execute(postgres_store.QUERIES["fail_waiting"],
                           {"id": subscription_id, "last_error": failed_because})
        stored = threading.Thread(target=lambda: store_plants(app, [1], give_back=True))
        stored.start()
        stored.join(timeout=30)
        assert not stored.is_alive(), "the create waited for the disabling transaction"
    finally:
        disabling.commit()
        disabling.close()
    stray = Delivery.get(Delivery.subscription == subscription_id)
    assert stray.status == Delivery.PENDING  # the race, as it happens

    run_housekeeping(app)

    stray = Delivery.get_by_id(stray.id)
    assert (stray.status, stray.last_error) == (Delivery.FAILED, failed_because)
