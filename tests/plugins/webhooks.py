"""Webhooks in tests: a real receiver (the ``make_receiver`` fixture),
signature checks, subscriptions made through the CLI, deliveries queued
straight through the delivery queue, leases, and the named webhook timing
settings the tests run under.

The receiver is an HTTP/1.1 server on loopback that records every request
and answers as the test tells it to; it is stopped when the test ends.

A module or test chooses its settings with the ``app_config`` marker:
``pytestmark = pytest.mark.app_config(RETRY_EVERY_SECOND)``.
"""
import dataclasses
import datetime
import http.server
import json
import os
import signal
import socket
import subprocess
import threading
import time

import pytest
from standardwebhooks import Webhook

from helpers import PLANTSTORE, REPO, ProcessOutput, wait_until
from plantstore.db import clock, database
from plantstore.db.models import Attempt, Delivery, Plant, User
from plantstore.webhooks import store_new_plant
from plantstore.webhooks.engine import queue

# Sends a test expects a receiver to answer: timeouts of seconds where a
# loopback receiver answers in milliseconds, so only the fault a test sets up
# fails a send, however loaded the machine.
PATIENT_SENDS = {"WEBHOOK_CONNECT_TIMEOUT": 5.0, "WEBHOOK_READ_TIMEOUT": 10.0}
# Sends a test expects to time out: they give up soon.
QUICK_TIMEOUTS = {"WEBHOOK_CONNECT_TIMEOUT": 0.3, "WEBHOOK_READ_TIMEOUT": 0.6}
# A failed send is retried once, due at once (by ``worker --once``).
RETRY_AT_ONCE = {**PATIENT_SENDS, "WEBHOOK_RETRY_SCHEDULE": "0"}
# A failed send is retried twice, a second apart.
RETRY_EVERY_SECOND = {**PATIENT_SENDS, "WEBHOOK_RETRY_SCHEDULE": "1,1"}
# Leases as short as allowed and retries due at once, for workers racing,
# dying and polling.
SHORT_LEASES = {"WEBHOOK_CONNECT_TIMEOUT": 0.5, "WEBHOOK_READ_TIMEOUT": 0.5,
                "WEBHOOK_LEASE_SECONDS": 2, "WEBHOOK_RETRY_SCHEDULE": "0,0,0",
                "WORKER_POLL_INTERVAL": 0.1}


@dataclasses.dataclass
class Received:
    """One request the receiver got."""
    method: str
    path: str
    headers: dict  # lower-cased names
    body: bytes
    at: float  # time.monotonic() when it arrived
    client_port: int
    finished: float | None = None  # time.monotonic() once its answer was sent (or cut)


@dataclasses.dataclass
class Answer:
    """What the receiver answers: status, headers, body, after a delay.

    An ``endless`` answer announces a 1 GiB body and streams it until the
    client hangs up.
    """
    status: int = 200
    headers: dict = dataclasses.field(default_factory=dict)
    body: bytes = b"ok"
    delay: float = 0.0
    endless: bool = False


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real receivers do
    disable_nagle_algorithm = True  # no 40 ms stall between headers and body

    def setup(self):
        super().setup()
        self.server.receiver.connections.add(self.connection)

    def finish(self):
        self.server.receiver.connections.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def _handle(self):
        receiver = self.server.receiver
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if len(body) < length:  # the sender died mid-request: nothing was delivered
            self.close_connection = True
            return
        received = Received(self.command, self.path,
                            {k.lower(): v for k, v in self.headers.items()},
                            body, time.monotonic(), self.client_address[1])
        answer = receiver.answer_for(received)
        receiver.record(received, answer)
        if answer.delay:
            receiver.released.wait(answer.delay)
        try:
            self._answer(answer, receiver)
        finally:
            received.finished = time.monotonic()

    def _answer(self, answer, receiver):
        try:
            self.send_response(answer.status)
            for name, value in answer.headers.items():
                self.send_header(name, value)
            length = 1 << 30 if answer.endless else len(answer.body)
            self.send_header("Content-Length", str(length))
            self.end_headers()
            self.wfile.write(answer.body)
            while answer.endless and not receiver.released.is_set():
                self.wfile.write(b"x" * 65536)
        except OSError:  # the sender gave up waiting: that is the point
            self.close_connection = True

    do_POST = do_GET = do_PUT = _handle

    def log_message(self, *args):
        """Silence the per-request log lines."""


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # a burst of connects waits to be accepted, as at real servers

    def handle_error(self, request, client_address):
        """Say nothing when a sender hangs up: tests provoke it on purpose."""


class Receiver:
    """A threaded HTTP server on 127.0.0.1 that records what it answered.

    ``answer`` is an ``Answer`` or a function of a ``Received`` returning
    one; it may be changed while the receiver runs. ``requests`` lists the
    requests received so far, in order, and ``answers`` what each was given.
    """

    def __init__(self, port=0, answer=None):
        self.answer = answer or Answer()
        self.requests = []
        self.answers = []
        self.released = threading.Event()
        self.connections = set()
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", port), _Handler)
        self._server.receiver = self
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        """Stop serving, wake every answer still being delayed, and hang up
        on kept-alive connections so no handler thread outlives the test."""
        self.released.set()
        self._server.shutdown()
        self._server.server_close()
        for connection in list(self.connections):
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def answer_for(self, received):
        answer = self.answer
        return answer(received) if callable(answer) else answer

    def record(self, received, answer):
        with self._lock:
            self.requests.append(received)
            self.answers.append(answer)

    def wait_for(self, count, timeout=30.0):
        """The first ``count`` requests received; fails after ``timeout`` seconds."""
        wait_until(lambda: len(self.requests) >= count, timeout, interval=0.01,
                   message=lambda: f"the receiver got {len(self.requests)} "
                                   f"requests, expected {count}")
        with self._lock:
            return list(self.requests[:count])


def verify(secret, received):
    """The JSON a received request carries, if its signature checks out with
    ``secret`` (raises ``WebhookVerificationError`` otherwise)."""
    return Webhook(secret).verify(received.body, received.headers)


@pytest.fixture
def make_receiver():
    """Start receivers (``make_receiver(answer=..., port=...)``); all stop afterwards."""
    started = []

    def make(answer=None, port=0):
        receiver = Receiver(port, answer).start()
        started.append(receiver)
        return receiver
    yield make
    for receiver in started:
        receiver.stop()


def subscribe(runner, url, bearer=None):
    """Register ``url`` with ``plantstore webhooks add``; its id and secret."""
    args = ["webhooks", "add", url] + (["--bearer", bearer] if bearer else [])
    result = runner.invoke(args=args)
    assert result.exit_code == 0, result.output
    created = json.loads(result.stdout)
    return created["id"], created["secret"]


def wait_for_attempts(count, timeout=30.0):
    """Wait until ``count`` attempts are recorded (sending threads write them)."""
    wait_until(lambda: Attempt.select().count() >= count, timeout,
               message="attempts were not recorded in time")


def store_plants(app, plant_ids, owner="alice", give_back=False):
    """Store these plants of ``owner`` as a create does (``store_new_plant``:
    the plant and its deliveries, leased to this process) without attempting
    anything; the jobs leased. With ``give_back``, their leases are cleared at
    once, as a create whose sender was full leaves them: due for any worker."""
    owner_id = User.get(User.name == owner).id
    jobs = []
    for plant_id in plant_ids:
        plant = Plant(id=plant_id, owner=owner_id, name=f"plant {plant_id}")
        jobs += store_new_plant(plant, app)
    if give_back:
        queue.give_back(jobs)
    return jobs


def wait_for_leases_to_run_out(timeout=60.0):
    """Wait until no pending delivery is leased any more by the database's
    clock (the leases of a process that died have run out)."""
    wait_until(lambda: not Delivery.select().where(
                   Delivery.status == Delivery.PENDING,
                   Delivery.locked_until > clock.now()).exists(),
               timeout, interval=0.05, message="the leases to run out")


def overlapping_sends(requests):
    """The webhook-ids of which two requests were under way at once (one
    arrived before the other's answer was sent), from a receiver's
    ``requests``; each answer must have been sent."""
    by_id = {}
    for got in requests:
        by_id.setdefault(got.headers["webhook-id"], []).append(got)
    overlapping = set()
    for message_id, sends in by_id.items():
        sends.sort(key=lambda got: got.at)
        assert all(got.finished is not None for got in sends), message_id
        if any(later.at < earlier.finished for earlier, later in zip(sends, sends[1:])):
            overlapping.add(message_id)
    return overlapping


def run_worker(runner):
    """Run ``plantstore worker --once`` in-process; what it printed."""
    result = runner.invoke(args=["worker", "--once"])
    assert result.exit_code == 0, result.output
    return result.stdout.strip()


def sleep_until(moment, timeout=60.0):
    """Wait until the database's clock (the one that says what is due) has
    passed the stored time ``moment``: a retry's due time, a lease's end."""
    wait_until(lambda: _database_clock_passed(moment), timeout, interval=0.02,
               message=f"the database's clock to pass {moment}")


def _database_clock_passed(moment):
    current = clock.now()
    if isinstance(current, datetime.datetime):  # SQLite: the process's clock
        return current > moment
    return database.execute_sql(f"SELECT {clock.POSTGRES_NOW} > %s", (moment,)).fetchone()[0]


# --- worker processes ---------------------------------------------------------

class WorkerProcess:
    """A ``plantstore worker`` process in its own process group, started
    with exactly ``env``; what it writes goes to a file."""

    def __init__(self, env):
        self.log = ProcessOutput()
        self.process = subprocess.Popen([str(PLANTSTORE), "worker"], cwd=REPO,
                                        env=env, stdout=self.log.file, stderr=subprocess.STDOUT,
                                        start_new_session=True)

    def output(self):
        """Everything it wrote so far."""
        return self.log.read()

    def entries(self):
        """Its JSON log lines so far, as dicts."""
        found = []
        for line in self.output().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and "message" in entry:
                found.append(entry)
        return found

    def messages(self):
        """The messages of its JSON log lines so far."""
        return [entry["message"] for entry in self.entries()]

    def wait_started(self, timeout=60.0):
        """Wait until it polls (its first log line says so)."""
        def started():
            if self.process.poll() is not None:
                raise AssertionError(f"the worker exited with {self.process.returncode}: "
                                     f"{self.output()[-2000:]}")
            return any(m.startswith("webhook worker started") for m in self.messages())
        wait_until(started, timeout, interval=0.05, message="the worker to start")

    def stop(self, stop_signal=signal.SIGTERM, timeout=60.0):
        """Signal its process group and wait until every process in it has
        exited; the worker's exit status."""
        os.killpg(self.process.pid, stop_signal)
        status = self.process.wait(timeout=timeout)
        wait_until(lambda: not self._group_alive(), timeout, interval=0.05,
                   message="the worker's process group to exit")
        return status

    def stopped_cleanly(self):
        """Whether it logged, last thing, that it stopped."""
        return any(m.startswith("webhook worker stopped") for m in self.messages())

    def _group_alive(self):
        try:
            os.killpg(self.process.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def kill(self):
        """SIGKILL its whole process group, if any of it still runs."""
        if self._group_alive():
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)


@pytest.fixture
def start_worker():
    """Start ``plantstore worker`` processes (``start_worker(env)``);
    any still running is killed with its process group afterwards."""
    started = []

    def start(env):
        started.append(WorkerProcess(env))
        return started[-1]
    yield start
    for worker in started:
        worker.kill()


# --- receivers that trickle their answer ------------------------------------

TRICKLE_EVERY = 0.3  # shorter than any test's read timeout: no single read times out
HEADERS_TRICKLED = (b"HTTP/1.1 200 OK\r\n", b"X-Slow: " + b"a" * 200)
BODY_TRICKLED = (b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", b"b" * 1000)


class Trickler:
    """A raw receiver on loopback: it reads a request, then sends ``head`` and
    trickles ``trickle`` one byte every TRICKLE_EVERY seconds until the
    sender hangs up. ``hung_up`` holds, per connection, when that happened."""

    def __init__(self, head, trickle):
        self.head, self.trickle = head, trickle
        self.accepted = []
        self.hung_up = []
        self._stop = threading.Event()
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}/hook"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self._stop.is_set():
            try:
                connection, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:  # closed by stop()
                return
            self.accepted.append(time.monotonic())
            threading.Thread(target=self._answer, args=(connection,), daemon=True).start()

    def _answer(self, connection):
        with connection:
            connection.recv(65536)
            try:
                connection.sendall(self.head)
                for byte in self.trickle:
                    if self._stop.wait(TRICKLE_EVERY):
                        return
                    connection.sendall(bytes([byte]))
            except OSError:
                self.hung_up.append(time.monotonic())

    def stop(self):
        self._stop.set()
        self._server.close()


@pytest.fixture
def trickler():
    started = []

    def start(head, trickle):
        started.append(Trickler(head, trickle))
        return started[-1]
    yield start
    for receiver in started:
        receiver.stop()
