"""The load client: threads on the client host creating plants through nginx,
each create followed from its first attempt to its final answer.

Without a retry policy every answer is final. With one, a create is sent
again, under the same ``Idempotency-Key`` and body, after a connection that
failed before any answer and (unless the policy says ``answers=False``)
after an answer that says "try again" (502, 503, 504, 429, or the 409 of a
key still held), waiting what ``Retry-After`` says (else a short backoff),
until its attempts or its time run out.
"""
import collections
import itertools
import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field

import requests

RETRYABLE = frozenset({429, 502, 503, 504})
CONNECT_TIMEOUT, READ_TIMEOUT = 3, 40
CLOSED_UNDER_REQUEST = ("RemoteDisconnected", "ConnectionResetError", "BrokenPipeError")
"""Causes of a kept-alive connection closed by the server as a request went
out on it (as nginx's old workers close their idle connections on a reload)."""


@dataclass
class Answer:
    """One attempt: when it was sent and answered, and what came back."""

    sent: float
    answered: float
    status: int = None  # None: no HTTP answer (see ``error``)
    error: str = None
    retry_after: str = None
    message: str = None
    replayed: bool = False
    rate_limit: tuple = None  # (reset, remaining) when the answer carried them

    @property
    def label(self):
        return str(self.status) if self.status is not None else self.error

    @property
    def closed_under_request(self):
        """No answer: the connection was closed as the request went out on it."""
        return self.status is None and self.error.endswith(
            tuple(f"({cause})" for cause in CLOSED_UNDER_REQUEST))


@dataclass
class Create:
    """One plant's create, from its first attempt to its final answer."""

    client: int
    plant_id: int
    key: str
    answers: list = field(default_factory=list)

    @property
    def final(self):
        return self.answers[-1]

    @property
    def ok(self):
        return self.final.status == 200

    @property
    def seconds(self):
        """From the first attempt sent to the final answer."""
        return self.final.answered - self.answers[0].sent


@dataclass(frozen=True)
class RetryPolicy:
    """Retry a create at most ``attempts`` times in all, for at most
    ``seconds``; after answers that say "try again" too unless ``answers``
    is false (then only after a connection that failed before any answer)."""

    attempts: int = 30
    seconds: float = 60.0
    backoff: float = 0.2
    answers: bool = True

    def retries(self, answer):
        if answer.status is None:
            return True
        return self.answers and (answer.status in RETRYABLE or _key_in_use(answer))


def _key_in_use(answer):
    """The 409 of an Idempotency-Key still held by another request."""
    return answer.status == 409 and answer.retry_after is not None


def _describe(error):
    """``error`` as ``Outer(Cause)``, e.g. ``ConnectionError(RemoteDisconnected)``."""
    cause = error
    for _ in range(6):
        inner = getattr(cause, "reason", None)
        if not isinstance(inner, BaseException):
            inner = next((arg for arg in reversed(cause.args)
                          if isinstance(arg, BaseException)), None)
        if inner is None:
            break
        cause = inner
    if cause is error:
        return type(error).__name__
    return f"{type(error).__name__}({type(cause).__name__})"


class Load:
    """``clients`` threads creating plants through ``base_url`` as ``token``'s
    user, with ids from ``ids``, until ``stop()``; each may be throttled to
    ``per_client_rate`` creates a second."""

    def __init__(self, network, host, base_url, token, ids, clients=8, retry=None,
                 per_client_rate=None):
        self.network = network
        self.host = host
        self.url = base_url + "/plants"
        self.token = token
        self.ids = ids
        self.clients = clients
        self.retry = retry
        self.interval = 1 / per_client_rate if per_client_rate else 0
        self.creates = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._threads = []
        self.started = self.stopped = None

    def start(self):
        self.started = time.time()
        for client in range(self.clients):
            thread = threading.Thread(target=self._client, args=(client,),
                                      name=f"load-{client}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, timeout=90):
        """Start no more creates; wait for those under way to get their final answer."""
        self._stopping.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [thread.name for thread in self._threads if thread.is_alive()]
        self.stopped = time.time()
        if stuck:
            raise TimeoutError(f"load clients {stuck} still waiting after {timeout} s")
        return self

    def answered(self):
        """Creates with a final answer so far."""
        with self._lock:
            return len(self.creates)

    def _client(self, client):
        self.network.enter(self.host)
        with requests.Session() as session:
            session.trust_env = False
            headers = {"Authorization": f"Bearer {self.token}"}
            while not self._stopping.is_set():
                began = time.monotonic()
                create = self._create(session, headers, client)
                with self._lock:
                    self.creates.append(create)
                if self.interval:
                    self._stopping.wait(max(0.0, self.interval - (time.monotonic() - began)))

    def _create(self, session, headers, client):
        plant_id = next(self.ids)
        create = Create(client, plant_id, str(uuid.uuid4()))
        if self.retry:
            headers = {**headers, "Idempotency-Key": create.key}
        body = {"id": plant_id, "name": f"fleet plant {plant_id}"}
        give_up = time.monotonic() + (self.retry.seconds if self.retry else 0)
        while True:
            answer = self._send(session, headers, body)
            create.answers.append(answer)
            if (not self.retry or not self.retry.retries(answer)
                    or len(create.answers) >= self.retry.attempts):
                return create
            wait = self.retry.backoff * min(len(create.answers), 5)
            if answer.retry_after and answer.retry_after.isdigit():
                wait = float(answer.retry_after)
            if time.monotonic() + wait > give_up:
                return create
            time.sleep(wait)

    def _send(self, session, headers, body):
        sent = time.time()
        try:
            response = session.post(self.url, json=body, headers=headers,
                                    timeout=(CONNECT_TIMEOUT, READ_TIMEOUT))
        except requests.RequestException as error:
            return Answer(sent, time.time(), error=_describe(error))
        answer = Answer(sent, time.time(), response.status_code,
                        retry_after=response.headers.get("Retry-After"),
                        replayed=response.headers.get("Idempotent-Replayed") == "true")
        if response.status_code != 200:
            try:
                answer.message = response.json().get("message")
            except ValueError:
                answer.message = response.text[:200]
        if "X-RateLimit-Remaining" in response.headers:
            answer.rate_limit = (response.headers.get("X-RateLimit-Reset"),
                                 int(response.headers["X-RateLimit-Remaining"]))
        return answer


class PlantIds:
    """Plant ids for every load of a run: never one twice."""

    def __init__(self, start):
        self._next = itertools.count(start)
        self._lock = threading.Lock()

    def __next__(self):
        with self._lock:
            return next(self._next)


def percentile(ordered, fraction):
    """The value at ``fraction`` (0..1) of the sorted, non-empty ``ordered``."""
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def figures(load):
    """The load's figures as printable lines."""
    creates = load.creates
    seconds = (load.stopped or time.time()) - load.started
    answers = [answer for create in creates for answer in create.answers]
    finals = collections.Counter(create.final.label for create in creates)
    every = collections.Counter(answer.label for answer in answers)
    latencies = sorted(create.seconds for create in creates) or [0.0]
    lines = [
        f"creates: {len(creates)} in {seconds:.1f} s ({len(creates) / seconds:.0f}/s) "
        f"by {load.clients} clients; final answers {dict(sorted(finals.items()))}",
        f"every answer (retries included): {dict(sorted(every.items()))}; "
        f"replayed {sum(answer.replayed for answer in answers)}",
        f"time to final answer: median {statistics.median(latencies) * 1000:.0f} ms, "
        f"p99 {percentile(latencies, 0.99) * 1000:.0f} ms, max {latencies[-1] * 1000:.0f} ms",
    ]
    return lines


def failures(creates):
    """Lines for creates whose final answer is not 200, at most 20."""
    bad = [create for create in creates if not create.ok]
    lines = [f"plant {create.plant_id} (client {create.client}): "
             + ", ".join(f"{answer.label}{' ' + repr(answer.message) if answer.message else ''}"
                         f" after {answer.answered - create.answers[0].sent:.2f} s"
                         for answer in create.answers)
             for create in bad[:20]]
    if len(bad) > 20:
        lines.append(f"... and {len(bad) - 20} more")
    return lines
