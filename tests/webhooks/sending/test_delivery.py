"""The "New Plant" webhook as a create request sends it: what receivers get
(body, headers, Standard Webhooks signature), the deliveries queued with
the plant, and the bounds that keep a bad receiver from hurting the create."""
import datetime
import json
import time

import pytest
from standardwebhooks.webhooks import WebhookVerificationError

from helpers import bearer, create_plant, free_port
from plantstore.db.models import Attempt, Delivery, Subscription
from plantstore.webhooks.engine import queue
from plugins.webhooks import (
    QUICK_TIMEOUTS,
    RETRY_EVERY_SECOND,
    Answer,
    subscribe,
    verify,
    wait_for_attempts,
)

pytestmark = pytest.mark.app_config(RETRY_EVERY_SECOND)
# For the tests whose attempts must run into their timeouts.
TIMING_OUT = {**RETRY_EVERY_SECOND, **QUICK_TIMEOUTS}
READ = TIMING_OUT["WEBHOOK_READ_TIMEOUT"]


def test_create_posts_the_signed_new_plant_to_every_active_receiver(
        client, runner, alice, make_receiver):
    plain, with_token = make_receiver(), make_receiver()
    _, plain_secret = subscribe(runner, plain.url)
    _, token_secret = subscribe(runner, with_token.url, bearer="rcv-token-1")
    before = int(time.time())

    create_plant(client, alice, 7, tag="green")

    for receiver, secret in ((plain, plain_secret), (with_token, token_secret)):
        [got] = receiver.wait_for(1)
        assert got.method == "POST" and got.path == "/hook"
        assert json.loads(got.body) == {"id": 7, "name": "fern", "tag": "green"}
        assert verify(secret, got) == {"id": 7, "name": "fern", "tag": "green"}
        assert got.headers["content-type"] == "application/json"
        assert got.headers["user-agent"] == "plantstore/1.0.0"
        assert got.headers["webhook-id"].startswith("msg_")
        assert got.headers["webhook-signature"].startswith("v1,")
        assert before <= int(got.headers["webhook-timestamp"]) <= time.time() + 1
    assert "authorization" not in plain.requests[0].headers
    assert with_token.requests[0].headers["authorization"] == "Bearer rcv-token-1"
    with pytest.raises(WebhookVerificationError):
        verify(plain_secret, with_token.requests[0])
    wait_for_attempts(2)
    assert {d.status for d in Delivery.select()} == {Delivery.DELIVERED}


def test_the_body_sent_is_exactly_the_stored_payload_and_omits_an_unset_tag(
        client, runner, alice, make_receiver):
    receiver = make_receiver()
    subscribe(runner, receiver.url)
    create_plant(client, alice, -9223372036854775808, "fern \u00e9\u2603", extra="x")
    [got] = receiver.wait_for(1)
    assert json.loads(got.body) == {"id": -9223372036854775808, "name": "fern \u00e9\u2603"}
    [delivery] = Delivery.select()
    assert got.body == delivery.payload.encode("utf-8")
    assert got.headers["webhook-id"] == delivery.message_id


def test_deliveries_are_written_in_the_plant_transaction_only_for_active_subscriptions(
        client, runner, alice, make_receiver):
    active, disabled = make_receiver(), make_receiver()
    active_id, _ = subscribe(runner, active.url)
    disabled_id, _ = subscribe(runner, disabled.url)
    queue.disable(disabled_id, queue.GONE, "test")

    create_plant(client, alice, 1)
    conflict = client.post("/plants", json={"id": 1, "name": "again"}, headers=bearer(alice))

    assert conflict.status_code == 409
    assert [d.subscription_id for d in Delivery.select()] == [active_id]
    active.wait_for(1)
    assert disabled.requests == []


def test_a_create_with_no_subscription_queues_nothing(client, alice):
    create_plant(client, alice, 1)
    assert Delivery.select().count() == 0


def test_a_failing_receiver_never_fails_the_create_and_the_delivery_waits_for_a_retry(
        client, runner, alice, make_receiver):
    receiver = make_receiver(Answer(500, body=b"database on fire"))
    subscribe(runner, receiver.url)

    response = create_plant(client, alice, 1)

    assert response.get_json() == {"name": "fern"}
    wait_for_attempts(1)
    [delivery] = Delivery.select()
    assert delivery.status == Delivery.PENDING and delivery.attempts == 1
    assert delivery.locked_until is None
    assert delivery.last_error == "HTTP 500: database on fire"
    [attempt] = Attempt.select()
    wait = (delivery.next_attempt_at - attempt.started_at).total_seconds()
    # The schedule's first step (1 s, ±10 % jitter), counted from the
    # attempt's start: its send and the writing of its outcome come on top.
    assert 0.9 <= wait <= 1.1 + 2.5, wait


@pytest.mark.app_config(TIMING_OUT)
def test_slow_receivers_never_hold_the_create(
        client, runner, alice, make_receiver):
    slow = [make_receiver(Answer(delay=5)) for _ in range(3)]
    for receiver in slow:
        subscribe(runner, receiver.url)

    started = time.monotonic()
    create_plant(client, alice, 1)
    elapsed = time.monotonic() - started

    assert elapsed < 5 / 2, elapsed  # the receivers answer after 5 s
    wait_for_attempts(3)
    for attempt in Attempt.select():
        assert attempt.status_code is None and attempt.error.startswith("timed out after")
    assert {d.status for d in Delivery.select()} == {Delivery.PENDING}


def test_unreachable_receiver_is_a_recorded_connection_failure(client, runner, alice):
    subscribe(runner, f"http://127.0.0.1:{free_port()}/hook")
    create_plant(client, alice, 1)
    wait_for_attempts(1)
    [attempt] = Attempt.select()
    assert attempt.status_code is None
    assert attempt.error == "connection refused"


def test_a_url_the_http_client_cannot_use_is_a_recorded_failure_not_a_failed_create(
        client, runner, alice):
    subscribe(runner, "http://127.0.0.1:9/hook")
    Subscription.update(url="http://[::1/hook").execute()  # written by hand, unparseable
    create_plant(client, alice, 1)
    wait_for_attempts(1)
    [attempt] = Attempt.select()
    assert attempt.status_code is None and attempt.error.startswith("URL not usable: ")
    assert Delivery.get().status == Delivery.PENDING


def test_a_redirect_is_a_failure_and_is_not_followed(client, runner, alice, make_receiver):
    target = make_receiver()
    redirecting = make_receiver(Answer(302, headers={"Location": target.url}))
    subscribe(runner, redirecting.url)

    create_plant(client, alice, 1)

    redirecting.wait_for(1)
    wait_for_attempts(1)
    [attempt] = Attempt.select()
    assert attempt.status_code == 302
    assert target.url in attempt.error
    assert Delivery.get().status == Delivery.PENDING
    assert target.requests == []


@pytest.mark.app_config(TIMING_OUT)
def test_an_endless_response_body_is_read_only_up_to_the_cap(
        client, runner, alice, make_receiver):
    receiver = make_receiver(Answer(200, endless=True))
    subscribe(runner, receiver.url)
    create_plant(client, alice, 1)
    wait_for_attempts(1)
    [attempt] = Attempt.select()
    # Reading it all would have run into the read deadline instead.
    assert attempt.status_code == 200 and attempt.duration_ms < READ * 1000
    assert Delivery.get().status == Delivery.DELIVERED


def test_consecutive_creates_reuse_the_receivers_keep_alive_connection(
        client, runner, alice, make_receiver):
    receiver = make_receiver()
    subscribe(runner, receiver.url)
    for plant_id in range(10):
        create_plant(client, alice, plant_id)
        wait_for_attempts(plant_id + 1)  # the sending thread is free again
    received = receiver.wait_for(10)
    connections = {got.client_port for got in received}
    assert len(connections) <= 3, connections  # not one connection per event


def test_the_attempt_log_keeps_time_status_and_duration(client, runner, alice, make_receiver):
    receiver = make_receiver(Answer(204, body=b"", delay=0.05))
    subscribe(runner, receiver.url)
    before = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    create_plant(client, alice, 1)
    wait_for_attempts(1)
    [attempt] = Attempt.select()
    assert attempt.status_code == 204 and attempt.error is None
    assert 40 <= attempt.duration_ms < 1000
    assert before - datetime.timedelta(seconds=1) <= attempt.started_at
    delivery = Delivery.get()
    assert delivery.status == Delivery.DELIVERED and delivery.delivered_at is not None


def test_a_cookie_set_by_a_receiver_is_never_sent_back(client, runner, alice, make_receiver):
    receiver = make_receiver(Answer(200, headers={"Set-Cookie": "tracker=1; Path=/"}))
    subscribe(runner, receiver.url)
    for plant_id in (1, 2):
        create_plant(client, alice, plant_id)
        wait_for_attempts(plant_id)
    assert [got.headers.get("cookie") for got in receiver.wait_for(2)] == [None, None]
