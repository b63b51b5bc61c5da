"""A hostile receiver beside a healthy one, played for real: whatever a
receiver answers (NUL bytes, invalid UTF-8, a 65 KB ``Location``), its
outcomes are stored (made storable and bounded), so no outcome batch is
poisoned and nobody else's event is sent twice. And every change of a
delivery's state fences an attempt in flight, so it can never bring a
disabled subscription's delivery back."""
import collections
import itertools
import threading

import pytest

from helpers import bearer, create_plant, wait_until
from plantstore.db.models import Attempt, Delivery, Subscription
from plantstore.housekeeping.runner import Housekeeping
from plantstore.webhooks.config import settings_of, web_sender_of
from plantstore.webhooks.engine import queue
from plantstore.webhooks.engine.backlog import oldest_due_age, sendable
from plantstore.webhooks.engine.receiver_text import EXCERPT_CHARS
from plantstore.webhooks.sending import http_post
from plantstore.webhooks.sending.worker import Worker
from plugins.webhooks import PATIENT_SENDS, Answer, subscribe

PLANTS = 20
SCHEDULE = (0.0, 0.0, 0.0)
THRESHOLD = 3
HOSTILE = {**PATIENT_SENDS, "WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
           "WEBHOOK_RETRY_SCHEDULE": ",".join(map(str, SCHEDULE)),
           "WEBHOOK_BREAKER_THRESHOLD": THRESHOLD, "WEBHOOK_BREAKER_COOLDOWN": 0.05}

HOSTILE_ANSWERS = (
    Answer(500, body=b"down\x00for\x00maintenance"),
    Answer(302, headers={"Location": "http://127.0.0.1/\x00" + "x" * 65_000}),
    Answer(500, body=b"\xff\xfe\xfd not UTF-8 \xc3\x28"),
    Answer(503, headers={"Retry-After": "\u00b2", "X-Reason": "\x00"}, body=b"\x00" * 5000),
)


def subscribe_user(client, token, receiver):
    response = client.post("/webhooks", json={"url": receiver.url}, headers=bearer(token))
    assert response.status_code == 201, response.get_json()
    return response.get_json()["id"]


def deliver_everything(app, timeout):
    """Run a worker over and over until no delivery is pending (or time is up)."""
    def drained():
        Worker(settings_of(app), Housekeeping()).run_once()
        return not Delivery.select().where(Delivery.status == Delivery.PENDING).exists()
    wait_until(drained, timeout, interval=0.05, message="every delivery to end")


@pytest.mark.slow
@pytest.mark.app_config(HOSTILE)
def test_a_hostile_receiver_poisons_no_batch_and_costs_its_neighbour_nothing(
        app, client, alice, bob, make_receiver):
    answers = itertools.cycle(HOSTILE_ANSWERS)
    lock = threading.Lock()

    def hostile_answer(received):
        with lock:
            return next(answers)
    hostile = make_receiver(hostile_answer)
    healthy = make_receiver(Answer(200))
    hostile_id = subscribe_user(client, alice, hostile)
    healthy_id = subscribe_user(client, bob, healthy)

    for plant_id in range(PLANTS):
        create_plant(client, alice, plant_id)
        create_plant(client, bob, 1000 + plant_id)
    deliver_everything(app, timeout=120)
    assert web_sender_of(app).finish() is None

    # the healthy user got each webhook-id exactly once
    per_id = collections.Counter(r.headers["webhook-id"] for r in healthy.requests)
    assert len(per_id) == PLANTS and set(per_id.values()) == {1}, per_id
    # the hostile one at most 1 + retries per id, every attempt recorded
    hostile_per_id = collections.Counter(r.headers["webhook-id"] for r in hostile.requests)
    assert len(hostile_per_id) == PLANTS
    assert max(hostile_per_id.values()) <= 1 + len(SCHEDULE), hostile_per_id
    attempts = list(Attempt.select().join(Delivery)
                    .where(Delivery.subscription == hostile_id))
    assert len(attempts) == len(hostile.requests)
    assert {d.status for d in Delivery.select().where(Delivery.subscription == hostile_id)} \
        == {Delivery.FAILED}
    # what it sent back is stored, storable and bounded
    texts = [text for a in attempts for text in (a.error, a.response_body) if text]
    texts += [d.last_error for d in Delivery.select()
              .where(Delivery.subscription == hostile_id)]
    assert texts and all(len(text) <= EXCERPT_CHARS and "\x00" not in text for text in texts)
    assert any(a.error.startswith("redirect to http://127.0.0.1/\ufffd") for a in attempts
               if a.status_code == 302)
    assert {a.status_code for a in attempts} == {500, 302, 503}  # ² ignored, status kept
    # its breaker opened as configured: the healthy one's never did
    assert Subscription.get_by_id(hostile_id).breaker_opened_at is not None
    assert Subscription.get_by_id(healthy_id).breaker_opened_at is None
    assert {d.status for d in Delivery.select().where(Delivery.subscription == healthy_id)} \
        == {Delivery.DELIVERED}


@pytest.mark.app_config({**PATIENT_SENDS, "WEBHOOK_RETRY_SCHEDULE": "0,0"})
def test_an_attempt_in_flight_never_brings_back_a_delivery_disabled_or_recovered_meanwhile(
        app, client, runner, alice, make_receiver):
    in_flight, release = threading.Event(), threading.Event()

    def hold_then_fail(received):
        in_flight.set()
        release.wait(30)
        return Answer(500, body=b"late")
    receiver = make_receiver(hold_then_fail)
    subscription_id, _ = subscribe(runner, receiver.url)

    create_plant(client, alice, 1)  # the create's own sender attempts it
    assert in_flight.wait(30)
    queue.disable(subscription_id, queue.FAILING, "switched off while an attempt ran")
    disabled = Delivery.get()
    assert disabled.status == Delivery.FAILED
    queue.enable(subscription_id)
    release.set()
    writer = web_sender_of(app).writer
    assert writer.flush(30)

    after = Delivery.get()
    assert (after.status, after.attempts, after.lease) == (
        Delivery.FAILED, 0, disabled.lease)  # the late 500 wrote nothing
    assert Attempt.select().count() == 0
    assert sendable().count() == 0 and oldest_due_age() == 0.0

    # recovered while a re-send is in flight: the re-send's outcome is not written
    in_flight.clear()
    release.clear()
    job = queue.take_for_resend(after.id, settings_of(app))
    sending = threading.Thread(
        target=lambda: writer.put(job, http_post.attempt(job, settings_of(app))))
    sending.start()
    assert in_flight.wait(30)
    queue.disable(subscription_id, queue.FAILING, "switched off again")
    queue.enable(subscription_id)
    assert queue.recover(subscription_id, after.created_at) == 1
    recovered = Delivery.get()
    release.set()
    sending.join(30)
    assert writer.flush(30)
    final = Delivery.get()
    assert (final.status, final.attempts, final.lease) == (
        Delivery.PENDING, 0, recovered.lease)
    assert Attempt.select().count() == 0
