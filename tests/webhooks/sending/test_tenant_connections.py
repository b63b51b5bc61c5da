"""No tenant's receiver decides another's outcomes: two owners' receivers
behind one address and port (a shared host or ingress), played by one raw
socket server, each answering as a hostile or broken receiver would.
Connections are pooled per subscription, interim 1xx answers are skipped,
a 101 fails the attempt, and a connection with bytes left on it is never
reused: every outcome recorded is the answer to that very request."""
import collections
import re
import socket
import threading
import time

import pytest

from helpers import bearer, create_plant, wait_until
from plantstore.db.models import Attempt, Delivery, Subscription
from plantstore.housekeeping.runner import Housekeeping
from plantstore.webhooks.config import settings_of
from plantstore.webhooks.sending.worker import Worker
from plugins.webhooks import PATIENT_SENDS

PLANTS = 12
SHARED_HOST = {**PATIENT_SENDS, "WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
               "WEBHOOK_RETRY_SCHEDULE": "0,0", "WEBHOOK_BREAKER_THRESHOLD": 1000}

OK, ERROR, GONE = (b"HTTP/1.1 %d X\r\nContent-Length: 2\r\n\r\nok" % status
                   for status in (200, 500, 410))
EARLY_HINTS = b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
SWITCHING = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
LATE = 0.2  # seconds between an interim answer (or an answer) and what follows it

# What each owner's receiver does with a request: the bytes it writes, in
# turns (a pause of LATE between turns), and the final status it means.
SCENARIOS = {
    "early hints, then a late 500 / 200": {
        "alice": ((EARLY_HINTS, ERROR), 500), "bob": ((OK,), 200)},
    "early hints, then a 200 / 500": {
        "alice": ((EARLY_HINTS, OK), 200), "bob": ((ERROR,), 500)},
    "a 200, then an unsolicited 410 / 200": {
        "alice": ((OK, GONE), 200), "bob": ((OK,), 200)},
    "a 101 / 200": {
        "alice": ((SWITCHING,), None), "bob": ((OK,), 200)},
}


class SharedHost:
    """One raw HTTP/1.1 server on loopback for every owner's receiver (the
    path names the owner). It keeps connections alive, answers each request
    as its owner's scenario says, and logs (webhook-id, status meant)."""

    def __init__(self, scenario):
        self.scenario = scenario
        self.answered = []  # (owner, webhook-id, status meant), in order
        self._stop = threading.Event()
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.1)
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def url(self, owner):
        return f"http://127.0.0.1:{self.port}/{owner}"

    def _serve(self):
        while not self._stop.is_set():
            try:
                connection, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._connection, args=(connection,), daemon=True).start()

    def _connection(self, connection):
        buffered = b""
        with connection:
            connection.settimeout(0.1)
            while not self._stop.is_set():
                request, buffered = self._read_request(connection, buffered)
                if request is None:
                    return
                owner = re.search(rb"^POST /(\w+) ", request).group(1).decode()
                webhook_id = re.search(rb"(?im)^webhook-id: *(\S+)", request).group(1).decode()
                turns, status = self.scenario[owner]
                self.answered.append((owner, webhook_id, status))
                try:
                    for number, turn in enumerate(turns):
                        if number and self._stop.wait(LATE):
                            return
                        connection.sendall(turn)
                except OSError:
                    return
                if status is None:  # a protocol switch: nothing HTTP follows
                    return

    def _read_request(self, connection, buffered):
        """One whole request (head and Content-Length body) and what follows it."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not self._stop.is_set():
            head_end = buffered.find(b"\r\n\r\n")
            if head_end >= 0:
                length = int(re.search(rb"(?im)^content-length: *(\d+)",
                                       buffered[:head_end]).group(1))
                end = head_end + 4 + length
                if len(buffered) >= end:
                    return buffered[:end], buffered[end:]
            try:
                chunk = connection.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return None, b""
            if not chunk:
                return None, b""
            buffered += chunk
        return None, b""

    def stop(self):
        self._stop.set()
        self._server.close()


@pytest.fixture
def shared_host():
    started = []

    def start(scenario):
        started.append(SharedHost(scenario))
        return started[-1]
    yield start
    for host in started:
        host.stop()


def still_pending():
    """The pending deliveries, for a failure's message: (id, subscription,
    whether it is active, attempts, lease, leased until, created, the
    subscription disabled at)."""
    return [(d.id, d.subscription_id, d.subscription.is_active, d.attempts, d.lease,
             d.locked_until, d.created_at, d.subscription.disabled_at)
            for d in Delivery.select(Delivery, Subscription).join(Subscription)
            .where(Delivery.status == Delivery.PENDING)]


def subscribe(client, token, url):
    response = client.post("/webhooks", json={"url": url}, headers=bearer(token))
    assert response.status_code == 201, response.get_json()
    return response.get_json()["id"]


@pytest.mark.slow
@pytest.mark.app_config(SHARED_HOST)
@pytest.mark.parametrize("name", SCENARIOS)
def test_every_outcome_is_the_answer_to_that_very_request_when_two_owners_share_a_host(
        app, client, alice, bob, shared_host, name):
    host = shared_host(SCENARIOS[name])
    subscriptions = {"alice": subscribe(client, alice, host.url("alice")),
                     "bob": subscribe(client, bob, host.url("bob"))}
    for plant_id in range(PLANTS):  # interleaved, so their requests follow each other
        create_plant(client, alice, plant_id)
        create_plant(client, bob, 1000 + plant_id)

    def ended():
        Worker(settings_of(app), Housekeeping()).run_once()
        return not Delivery.select().where(Delivery.status == Delivery.PENDING).exists()
    wait_until(ended, 120, interval=0.05,
               message=lambda: f"every delivery to end; still pending: {still_pending()}")

    meant = collections.defaultdict(list)  # webhook-id -> statuses meant, in order
    for _, webhook_id, status in host.answered:
        meant[webhook_id].append(status)
    recorded = collections.defaultdict(list)
    for attempt in (Attempt.select(Attempt, Delivery).join(Delivery)
                    .order_by(Attempt.id)):
        recorded[attempt.delivery.message_id].append(attempt.status_code)
    bob_ids = {d.message_id for d in Delivery.select().where(
        Delivery.subscription == subscriptions["bob"])}
    assert len(bob_ids) == PLANTS
    for webhook_id in bob_ids:  # bob's receiver alone decided bob's outcomes
        assert recorded[webhook_id] == meant[webhook_id], (webhook_id, recorded[webhook_id])
    bob_status = SCENARIOS[name]["bob"][1]
    assert {d.status for d in Delivery.select().where(
        Delivery.subscription == subscriptions["bob"])} == {
        Delivery.DELIVERED if bob_status == 200 else Delivery.FAILED}
    assert Subscription.get_by_id(subscriptions["bob"]).is_active

    alice_statuses = {status for webhook_id, statuses in recorded.items()
                      if webhook_id not in bob_ids for status in statuses}
    if "unsolicited" in name:
        # an answer sent unasked can only ever be read by alice's own next
        # request, on a connection of her own
        assert alice_statuses <= {200, 410}
    else:
        unanswered = [  # what an attempt with no status got, and what the host saw of it
            (attempt.delivery.id, attempt.delivery.message_id, attempt.started_at,
             attempt.duration_ms, attempt.error, meant.get(attempt.delivery.message_id))
            for attempt in Attempt.select(Attempt, Delivery).join(Delivery)
            .where(Attempt.status_code.is_null())]
        assert alice_statuses == {SCENARIOS[name]["alice"][1]}, unanswered
        assert 103 not in alice_statuses and 101 not in alice_statuses
    if SCENARIOS[name]["alice"][1] is None:
        errors = {a.error for a in Attempt.select().join(Delivery).where(
            Delivery.subscription == subscriptions["alice"])}
        assert errors and all("101" in error for error in errors), errors
