"""The operators' webhook commands: ``plantstore webhooks``, ``deliveries``
and ``worker --once``, their output and their refusals."""
import base64
import json
import time

import pytest

from helpers import assert_error, create_plant, plantstore_env, run_plantstore, wait_until
from plantstore import db
from plantstore.db import clock
from plantstore.db.models import Attempt, Delivery, Subscription, utcnow
from plantstore.webhooks.engine import queue
from plantstore.webhooks.engine.rules import GONE
from plantstore.webhooks.receivers import secrets
from plantstore.webhooks.receivers.registration import BEARER_MAX_LENGTH, URL_MAX_LENGTH
from plantstore.webhooks.sending import attempt
from plantstore.webhooks.subscriptions import store as subscription_store
from plugins.webhooks import RETRY_AT_ONCE, Answer, subscribe, verify, wait_for_attempts

pytestmark = pytest.mark.app_config(RETRY_AT_ONCE)


def invoke(runner, *args):
    return runner.invoke(args=list(args))


@pytest.fixture
def one_of_each(client, runner, alice, make_receiver):
    """Deliveries 1 delivered, 2 failed (two attempts, HTTP 500), 3 pending."""
    receiver = make_receiver()
    subscribe(runner, receiver.url)
    create_plant(client, alice, 1)
    wait_for_attempts(1)
    receiver.answer = Answer(500, body=b"boom")
    create_plant(client, alice, 2)
    wait_for_attempts(2)
    assert invoke(runner, "worker", "--once").stdout.strip() == "failed 1"
    create_plant(client, alice, 3)
    wait_for_attempts(4)
    return receiver


def test_webhooks_add_prints_one_json_object_with_id_url_and_secret(runner):
    result = invoke(runner, "webhooks", "add", "https://hooks.example.com/plants")
    assert result.exit_code == 0, result.output
    created = json.loads(result.stdout)
    assert set(created) == {"id", "url", "secret"}
    assert created["url"] == "https://hooks.example.com/plants"
    assert created["secret"].startswith("whsec_")
    assert len(base64.b64decode(created["secret"][len("whsec_"):])) == 32
    subscription = Subscription.get_by_id(created["id"])
    assert subscription.secret == created["secret"] and subscription.is_active
    assert subscription.bearer_token is None


def test_the_installed_command_prints_only_the_json_object_on_stdout(app, database_url):
    result = run_plantstore("webhooks", "add", "http://127.0.0.1:9/hook", "--bearer", "t0k",
                            env={"PATH": "/usr/bin:/bin", **plantstore_env(database_url)})
    assert result.returncode == 0, result.stderr
    created = json.loads(result.stdout)
    assert created["url"] == "http://127.0.0.1:9/hook"
    assert Subscription.get_by_id(created["id"]).bearer_token == "t0k"


@pytest.mark.slow
def test_a_malformed_webhook_setting_is_named_without_a_traceback(app, database_url):
    result = run_plantstore(
        "worker", "--once",
        env={"PATH": "/usr/bin:/bin",
             **plantstore_env(database_url, WEBHOOK_RETRY_SCHEDULE="5,soon")})
    assert result.returncode == 1
    assert result.stderr.startswith(
        "Error: PLANTSTORE_WEBHOOK_RETRY_SCHEDULE must be seconds, comma-separated")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("url", ["ftp://example.com/hook", "example.com/hook", "http://",
                                 "file:///etc/passwd", "javascript:alert(1)",
                                 "http://example.com:99999/hook",
                                 "https://user:secret@example.com/hook"])
def test_webhooks_add_refuses_anything_but_an_http_or_https_url(runner, url):
    result = invoke(runner, "webhooks", "add", url)
    assert result.exit_code == 2
    assert "Invalid value for 'URL'" in result.stderr
    assert result.stdout == ""
    assert Subscription.select().count() == 0


def longest_url(extra=0):
    """A receiver URL of ``URL_MAX_LENGTH`` characters, plus ``extra``."""
    start = "https://hooks.example.com/"
    return start + "a" * (URL_MAX_LENGTH - len(start) + extra)


def test_webhooks_add_takes_the_longest_url_and_refuses_one_character_more(runner):
    assert invoke(runner, "webhooks", "add", longest_url()).exit_code == 0

    refused = invoke(runner, "webhooks", "add", longest_url(extra=1))

    assert refused.exit_code == 2
    assert f"Must be 1 to {URL_MAX_LENGTH} characters, e.g. " in refused.stderr
    assert Subscription.select().count() == 1


def test_webhooks_add_takes_the_longest_bearer_and_refuses_one_character_more(runner):
    url = "https://hooks.example.com/plants"
    taken = invoke(runner, "webhooks", "add", url, "--bearer", "b" * BEARER_MAX_LENGTH)
    assert taken.exit_code == 0, taken.output
    assert Subscription.get().bearer_token == "b" * BEARER_MAX_LENGTH

    refused = invoke(runner, "webhooks", "add", url, "--bearer", "b" * (BEARER_MAX_LENGTH + 1))

    assert refused.exit_code == 2
    assert f"Must be 1 to {BEARER_MAX_LENGTH} characters, e.g. " in refused.stderr
    assert Subscription.select().count() == 1


REFUSED_BOTH_WAYS = [
    ({"url": "ftp://127.0.0.1/hook"}, "url"),
    ({"url": "http://user:pw@127.0.0.1/hook"}, "url"),
    ({"url": "http://127.0.0.1/ hook"}, "url"),
    ({"url": "http://127.0.0.1/\x7fhook"}, "url"),
    ({"url": "http://127.0.0.1:99999/hook"}, "url"),
    ({"url": "http:///hook"}, "url"),
    ({"url": "http://127.0.0.1/hook", "bearer": "two\r\nlines"}, "bearer"),
    ({"url": "http://127.0.0.1/hook", "bearer": "has space"}, "bearer"),
    ({"url": "http://127.0.0.1/hook", "bearer": "semi;colon"}, "bearer"),
    ({"url": "http://127.0.0.1/hook", "bearer": "=padding-first"}, "bearer"),
    ({"url": "http://127.0.0.1/hook", "bearer": "tökén"}, "bearer"),
]


@pytest.mark.app_config({**RETRY_AT_ONCE, "WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8"})
@pytest.mark.parametrize("body, field", REFUSED_BOTH_WAYS)
def test_the_command_and_the_api_refuse_a_receiver_alike(client, runner, alice, body, field):
    answer = client.post("/webhooks", json=body, headers={"Authorization": f"Bearer {alice}"})
    [said] = assert_error(answer, 400)["details"][field]

    args = ["webhooks", "add", body["url"]]
    if "bearer" in body:
        args += ["--bearer", body["bearer"]]
    result = invoke(runner, *args)

    assert result.exit_code == 2
    assert f"Invalid value for '{'URL' if field == 'url' else '--bearer'}': {said}" in \
        " ".join(result.stderr.split())
    assert Subscription.select().count() == 0


def test_webhooks_list_shows_each_receiver_and_its_state_but_no_secret(runner):
    first, secret = subscribe(runner, "http://127.0.0.1:9/a", bearer="very-private")
    second, _ = subscribe(runner, "https://example.com/b")
    invoke(runner, "webhooks", "rotate-secret", str(second))
    Subscription.update(is_active=False, disabled_reason="gone").where(
        Subscription.id == first).execute()

    result = invoke(runner, "webhooks", "list")

    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].split("\t")[:5] == [str(first), "http://127.0.0.1:9/a", "operator",
                                        "disabled (gone)", "bearer token"]
    assert lines[1].split("\t")[:5] == [str(second), "https://example.com/b", "operator",
                                        "active", "no bearer token"]
    assert "1 previous secret(s) sign until" in lines[1]
    assert "whsec_" not in result.stdout and "very-private" not in result.stdout


def test_webhooks_remove_deletes_the_receiver_with_its_deliveries(
        client, runner, alice, make_receiver):
    receiver = make_receiver()
    subscription_id, _ = subscribe(runner, receiver.url)
    create_plant(client, alice, 1)
    wait_for_attempts(1)
    result = invoke(runner, "webhooks", "remove", str(subscription_id))
    assert result.exit_code == 0
    assert result.stdout.strip() == f"removed webhook subscription {subscription_id}"
    assert Subscription.select().count() == 0 and Delivery.select().count() == 0
    assert Attempt.select().count() == 0


def test_webhooks_rotate_secret_prints_the_new_secret_and_keeps_the_old_one_for_the_overlap(
        runner):
    subscription_id, old = subscribe(runner, "http://127.0.0.1:9/hook")
    result = invoke(runner, "webhooks", "rotate-secret", str(subscription_id))
    assert result.exit_code == 0
    new = result.stdout.strip()
    assert new.startswith("whsec_") and new != old
    assert "24 h" in result.stderr
    subscription = Subscription.get_by_id(subscription_id)
    [(previous, expires)] = secrets.retired(subscription, utcnow())
    assert (subscription.secret, previous) == (new, old)
    overlap = expires - subscription.created_at
    assert 23.9 * 3600 < overlap.total_seconds() < 24.1 * 3600


def test_webhooks_enable_sends_to_a_disabled_receiver_again(
        client, runner, alice, make_receiver):
    receiver = make_receiver(Answer(410))
    subscription_id, _ = subscribe(runner, receiver.url)
    create_plant(client, alice, 1)
    wait_for_attempts(1)
    assert not Subscription.get_by_id(subscription_id).is_active

    receiver.answer = Answer(200)
    result = invoke(runner, "webhooks", "enable", str(subscription_id))
    assert result.exit_code == 0
    create_plant(client, alice, 2)
    assert json.loads(receiver.wait_for(2)[1].body)["id"] == 2


@pytest.mark.parametrize("command", [
    ("webhooks", "remove"), ("webhooks", "rotate-secret"), ("webhooks", "enable"),
    ("deliveries", "show"), ("deliveries", "retry")])
def test_an_unknown_id_is_refused_with_a_clear_message(runner, command):
    result = invoke(runner, *command, "4242")
    assert result.exit_code == 1
    assert "with id 4242" in result.stderr
    not_a_number = invoke(runner, *command, "four")
    assert not_a_number.exit_code == 2
    largest = 2**63 - 1 if command[0] == "deliveries" else 2**31 - 1  # as each id column holds
    assert f"expected an id from 1 to {largest}, e.g. 12, not 'four'" in not_a_number.stderr


def test_deliveries_list_shows_every_delivery_newest_first_and_filters_by_status(
        runner, one_of_each):
    result = invoke(runner, "deliveries", "list")
    assert result.exit_code == 0
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    assert [(row[0], row[1], row[4]) for row in rows] == [
        ("3", "pending", "1"), ("2", "failed", "2"), ("1", "delivered", "1")]
    assert rows[1][5] == "last error: HTTP 500: boom"
    assert rows[2][5].startswith("delivered 20")
    for status, expected in (("pending", "3"), ("failed", "2"), ("delivered", "1")):
        filtered = invoke(runner, "deliveries", "list", "--status", status)
        assert [line.split("\t")[0] for line in filtered.stdout.splitlines()] == [expected]
    assert invoke(runner, "deliveries", "list", "--status", "lost").exit_code == 2
    assert len(invoke(runner, "deliveries", "list", "--limit", "2").stdout.splitlines()) == 2


def test_deliveries_summary_counts_each_state_and_the_oldest_due_age(app, runner):
    with app.app_context(), db.database.atomic():
        subscription = Subscription.create(url="http://127.0.0.1:9/hook", secret="whsec_x")
        for number, (status, due_for) in enumerate([
                (Delivery.PENDING, 90), (Delivery.PENDING, -600), (Delivery.DELIVERED, 9000),
                (Delivery.FAILED, 9000), (Delivery.FAILED, 9000)]):
            Delivery.create(subscription=subscription, message_id=f"msg_{number}",
                            event_type="plant.created", payload="{}", status=status,
                            next_attempt_at=clock.before(due_for))

    result = invoke(runner, "deliveries", "summary")

    assert result.exit_code == 0, result.output
    lines = [line.split("\t") for line in result.stdout.splitlines()]
    assert lines[:3] == [["pending", "2"], ["delivered", "1"], ["failed", "2"]]
    label, age = lines[3]
    assert label == "oldest due age" and age.endswith(" s")
    assert 90 <= int(age.removesuffix(" s")) < 90 + 60


def test_deliveries_summary_says_when_nothing_is_due(runner):
    result = invoke(runner, "deliveries", "summary")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "pending\t0", "delivered\t0", "failed\t0", "oldest due age\t0 s (none due)"]


def test_deliveries_show_lists_every_attempt_with_time_status_and_duration(
        runner, one_of_each):
    result = invoke(runner, "deliveries", "show", "2")
    assert result.exit_code == 0
    text = result.stdout
    delivery = Delivery.get_by_id(2)
    assert f"webhook-id:   {delivery.message_id}" in text
    assert "status:       failed" in text
    assert 'payload:      {"id": 2, "name": "fern"}' in text
    assert "attempts:     2" in text
    attempt_lines = [line for line in text.splitlines()
                     if line.startswith("  ") and not line.startswith("    ")]
    assert len(attempt_lines) == 2
    for line in attempt_lines:
        moment, answer, duration = line.strip().split("\t")
        assert moment.startswith("20") and answer == "HTTP 500 boom"
        assert duration.endswith(" ms")
    assert [line for line in text.splitlines() if line.startswith("    ")] == [
        "    body: boom"] * 2


def test_deliveries_show_prints_a_receivers_body_on_one_line_without_its_control_characters(
        client, runner, alice, make_receiver):
    receiver = make_receiver(answer=Answer(400, body=b"bad\r\n\x1b[2Jgone\tnow"))
    subscribe(runner, receiver.url)
    create_plant(client, alice, 1)
    wait_for_attempts(1)

    text = invoke(runner, "deliveries", "show", "1").stdout

    assert "    body: bad\\r\\n\\x1b[2Jgone\\tnow" in text.splitlines()
    assert "\x1b" not in text


def test_every_line_showing_a_receivers_text_escapes_it(client, runner, alice, make_receiver):
    # CR LF, then ESC and the C1 control CSI (U+009B) each starting a screen-clearing sequence
    receiver = make_receiver(answer=Answer(400, body=b"bad\r\nforged line\x1b[2J\xc2\x9b2J"))
    subscribe(runner, receiver.url)
    create_plant(client, alice, 1)
    wait_for_attempts(1)
    escaped = "bad\\r\\nforged line\\x1b[2J\\x9b2J"

    shown = invoke(runner, "deliveries", "show", "1").stdout
    listed = invoke(runner, "deliveries", "list").stdout
    retried = invoke(runner, "deliveries", "retry", "1")

    assert f"last error:   HTTP 400: {escaped}" in shown.splitlines()
    assert [line.split("\t")[1] for line in shown.splitlines()
            if line.startswith("  20")] == [f"HTTP 400 {escaped}"]
    assert listed.splitlines()[0].endswith(f"last error: HTTP 400: {escaped}")
    assert retried.exit_code == 1 and f"(HTTP 400: {escaped})" in retried.stderr
    for text in (shown, listed, retried.stderr):
        assert not any(control in text for control in "\r\x1b\x9b"), repr(text)
        assert not any(line.startswith("forged") for line in text.splitlines())


def test_deliveries_show_gives_the_trace_id_of_the_create_that_queued_it(runner, one_of_each):
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    (Delivery.update(traceparent=f"00-{trace_id}-00f067aa0ba902b7-01")
     .where(Delivery.id == 2).execute())

    traced = invoke(runner, "deliveries", "show", "2").stdout
    untraced = invoke(runner, "deliveries", "show", "1").stdout

    assert f"trace id:     {trace_id}" in traced.splitlines()
    assert "trace id" not in untraced


def test_deliveries_retry_resends_a_failed_delivery_now_with_the_same_webhook_id(
        runner, one_of_each):
    receiver = one_of_each
    receiver.answer = Answer(200)
    delivery = Delivery.get_by_id(2)
    secret = Subscription.get().secret

    result = invoke(runner, "deliveries", "retry", "2")

    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"delivered {delivery.message_id}"
    last = receiver.requests[-1]
    assert last.headers["webhook-id"] == delivery.message_id
    assert verify(secret, last) == {"id": 2, "name": "fern"}
    assert Delivery.get_by_id(2).status == Delivery.DELIVERED
    assert Attempt.select().where(Attempt.delivery == 2).count() == 3


def test_a_retry_that_fails_again_goes_back_on_the_retry_schedule(runner, one_of_each):
    result = invoke(runner, "deliveries", "retry", "2")
    assert result.exit_code == 1
    assert "failed again (HTTP 500: boom); will retry at" in result.stderr
    delivery = Delivery.get_by_id(2)
    assert delivery.status == Delivery.PENDING and delivery.attempts == 1


def test_deliveries_retry_refuses_a_delivered_one_and_one_of_a_disabled_receiver(
        runner, one_of_each):
    delivered = invoke(runner, "deliveries", "retry", "1")
    assert delivered.exit_code == 1 and "already delivered" in delivered.stderr
    Subscription.update(is_active=False, disabled_reason="gone").execute()
    disabled = invoke(runner, "deliveries", "retry", "2")
    assert disabled.exit_code == 1
    assert "is disabled (gone)" in disabled.stderr and "webhooks enable" in disabled.stderr
    assert len(one_of_each.requests) == 4


def change_after_the_take(monkeypatch, change):
    """Make ``change()`` happen once ``deliveries retry`` has taken its
    delivery, and its job go stale (older than ``attempt.FRESH_SECONDS``)
    before the attempt: the seam a slow command or a busy host opens."""
    take = queue.take_for_resend

    def take_then_change(delivery_id, settings):
        job = take(delivery_id, settings)
        change()
        wait_until(lambda: time.monotonic() - job.leased_at > attempt.FRESH_SECONDS,
                   message="the job to go stale")
        return job

    monkeypatch.setattr(queue, "take_for_resend", take_then_change)


def test_a_retry_is_sent_to_the_url_its_subscription_has_when_it_starts(
        runner, one_of_each, make_receiver, monkeypatch):
    moved = make_receiver()
    subscription_id = Subscription.get().id
    change_after_the_take(monkeypatch,
                          lambda: subscription_store.change(subscription_id, url=moved.url))
    sent_before = len(one_of_each.requests)
    result = invoke(runner, "deliveries", "retry", "2")
    assert result.exit_code == 0, result.output
    assert len(moved.requests) == 1 and len(one_of_each.requests) == sent_before
    assert Delivery.get_by_id(2).status == Delivery.DELIVERED


def test_a_retry_of_a_subscription_disabled_meanwhile_is_not_sent(
        runner, one_of_each, monkeypatch):
    subscription_id = Subscription.get().id
    change_after_the_take(monkeypatch, lambda: queue.disable(subscription_id, GONE, "gone"))
    sent_before = len(one_of_each.requests)
    result = invoke(runner, "deliveries", "retry", "2")
    assert result.exit_code == 1
    assert "delivery 2 not sent: its subscription changed meanwhile" in result.stderr
    assert len(one_of_each.requests) == sent_before
    assert Attempt.select().where(Attempt.delivery == 2).count() == 2


def test_worker_once_says_what_it_did_and_exits_zero(runner, one_of_each):
    one_of_each.answer = Answer(200)
    delivered = invoke(runner, "worker", "--once")
    assert (delivered.exit_code, delivered.stdout.strip()) == (0, "delivered 1")
    nothing = invoke(runner, "worker", "--once")
    assert (nothing.exit_code, nothing.stdout.strip()) == (0, "nothing due")
