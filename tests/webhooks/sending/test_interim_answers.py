"""Every interim (1xx) answer counts, ``100 Continue`` included, played by
a raw receiver on loopback: an answer after 16 interim ones is an answer,
one more fails the attempt with a clear error, and a receiver streaming
``100 Continue`` without end holds a sender thread for milliseconds, not
until the attempt's deadline, and is never recorded as delivered."""
import contextlib
import re
import socket
import threading
import time

import pytest

from plantstore.db.models import Attempt, Delivery
from plantstore.housekeeping.runner import Housekeeping
from plantstore.webhooks.config import settings_of
from plantstore.webhooks.sending import http_post
from plantstore.webhooks.sending.interim import MOST_INTERIM_ANSWERS
from plantstore.webhooks.sending.worker import Worker
from plugins.webhooks import PATIENT_SENDS, store_plants, subscribe

pytestmark = pytest.mark.app_config({**PATIENT_SENDS, "WEBHOOK_RETRY_SCHEDULE": "60"})

CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
EARLY_HINTS = b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
BIG_HINTS = (b"HTTP/1.1 103 Early Hints\r\n"
             + b"".join(b"Link: </%05d.css>; rel=preload; x=%s\r\n" % (n, b"y" * 300)
                        for n in range(120)) + b"\r\n")
"""An interim answer of about 40 KiB in 120 header lines."""
FAST_BOUND = 3.0
"""Longest an attempt refused for its interim answers may take (it takes
milliseconds; the deadline is 15 s)."""


class ScriptedReceiver:
    """A raw HTTP receiver on loopback: it reads each request, writes
    ``script`` and hangs up; with ``endless``, it writes ``script`` over and
    over until the sender hangs up."""

    def __init__(self, script, endless=False):
        self.script, self.endless = script, endless
        self.requests = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}/hook"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(connection,), daemon=True).start()

    def _answer(self, connection):
        with connection:
            request = b""
            while b"\r\n\r\n" not in request:
                request += connection.recv(65536)
            length = int(re.search(rb"(?im)^content-length: *(\d+)", request).group(1))
            while len(request) < request.index(b"\r\n\r\n") + 4 + length:
                request += connection.recv(65536)
            self.requests += 1
            with contextlib.suppress(OSError):
                connection.sendall(self.script)
                while self.endless:
                    connection.sendall(self.script)

    def stop(self):
        self._listener.close()


@pytest.fixture
def scripted_receiver():
    started = []

    def start(script, endless=False):
        started.append(ScriptedReceiver(script, endless))
        return started[-1]
    yield start
    for receiver in started:
        receiver.stop()


def one_attempt(app, runner, url):
    """One real attempt at a delivery to ``url``: its result, how long it
    took, and the CPU time this thread spent on it."""
    subscribe(runner, url)
    [job] = store_plants(app, [1])
    started, cpu = time.monotonic(), time.thread_time()
    result = http_post.attempt(job, settings_of(app))
    return result, time.monotonic() - started, time.thread_time() - cpu


INTERIM_THEN_ANSWER = {
    "16 early hints": 16 * EARLY_HINTS,
    "16 continues": 16 * CONTINUE,
    "16 continues and early hints": 8 * (CONTINUE + EARLY_HINTS),
}


@pytest.mark.parametrize("name", INTERIM_THEN_ANSWER)
def test_an_answer_after_the_most_interim_answers_is_the_answer(
        app, runner, alice, scripted_receiver, name):
    assert INTERIM_THEN_ANSWER[name].count(b"HTTP/1.1 1") == MOST_INTERIM_ANSWERS
    receiver = scripted_receiver(INTERIM_THEN_ANSWER[name] + OK)
    result, _, _ = one_attempt(app, runner, receiver.url)
    assert (result.status_code, result.ok) == (200, True), result


TOO_MANY = {
    "17 continues": (17 * CONTINUE, "more than 16 interim 1xx answers"),
    "1,000 continues": (1000 * CONTINUE, "more than 16 interim 1xx answers"),
    "early hints split by continues": (9 * (EARLY_HINTS + CONTINUE),
                                       "more than 16 interim 1xx answers"),
    "80 KiB of early hints": (2 * BIG_HINTS, "interim 1xx answers took more than 64 KiB"),
}


@pytest.mark.parametrize("name", TOO_MANY)
def test_more_interim_answers_than_the_bound_fail_the_attempt_at_once(
        app, runner, alice, scripted_receiver, name):
    script, said = TOO_MANY[name]
    receiver = scripted_receiver(script + OK)
    result, took, _ = one_attempt(app, runner, receiver.url)
    assert result.status_code is None and not result.ok, result
    assert said in result.error, result.error
    assert took < FAST_BOUND, took


@pytest.mark.slow
def test_a_receiver_streaming_continues_holds_a_sender_for_milliseconds_and_is_not_delivered(
        app, runner, alice, scripted_receiver):
    receiver = scripted_receiver(1000 * CONTINUE, endless=True)
    result, took, cpu = one_attempt(app, runner, receiver.url)
    assert not result.ok and "more than 16 interim 1xx answers" in result.error, result
    assert took < FAST_BOUND and cpu < FAST_BOUND / 3, (took, cpu)

    # through a worker: the attempt is recorded as failed, never as delivered
    store_plants(app, [2], give_back=True)
    started = time.monotonic()
    Worker(settings_of(app), Housekeeping()).run_once()
    assert time.monotonic() - started < FAST_BOUND
    [recorded] = Attempt.select()
    assert recorded.status_code is None and "more than 16 interim" in recorded.error
    delivery = Delivery.get_by_id(recorded.delivery_id)
    assert (delivery.status, delivery.attempts) == (Delivery.PENDING, 1)  # retried later
