"""A hard wall-clock deadline on a whole HTTP attempt, headers and body included.

requests' read timeout bounds each socket read, not the answer: a receiver
that trickles a byte per read timeout never times out. Here, the socket of
an attempt is handed to one watchdog thread per process as soon as the
attempt has it (on connect, and on each request over a kept-alive
connection); at the attempt's deadline the watchdog shuts the socket down,
so the read blocked on it returns at once and the attempt fails. A socket
whose attempt ended in time goes back to the pool untouched.

An attempt may also have a latest start (its lease's): a request that
would be written after it is not written at all (``LeaseRanOut``), so a
process that was stopped after building a request and woke after its lease
ran out sends nothing.

Its connections read an answer as RFC 9110 section 15.2 says: every interim
1xx answer before it (100 and 102-199) is skipped, and a 101 (a protocol
switch a webhook does not ask for) ends the attempt as a failure.

``DeadlineAdapter`` is the requests transport adapter whose connections do
this; wrap each attempt in ``attempt_deadline(seconds, start_by)``.
"""
import contextlib
import heapq
import http.client
import itertools
import os
import socket
import threading
import time

from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

_current = threading.local()


class _Attempt:
    """One attempt under way: its deadline and the sockets it uses."""

    def __init__(self, deadline, start_by):
        self.deadline = deadline
        self.start_by = start_by  # time.monotonic() after which no request is written
        self.written = False  # whether a request's first byte may have left
        self.ended = False
        self.cut = False
        self.lock = threading.Lock()
        self.sockets = []

    def cut_off(self):
        """Shut this attempt's sockets down, unless it ended in time."""
        with self.lock:
            if self.ended:
                return
            self.cut = True
            for sock in self.sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # already closed by its connection

    def end(self):
        """The attempt is over: its deadline no longer cuts its sockets. Call
        it before a connection goes back to the pool, where another attempt
        may take it."""
        with self.lock:
            self.ended = True


class _Watchdog:
    """The thread that cuts off attempts at their deadline (one per process)."""

    def __init__(self):
        self._heap = []
        self._order = itertools.count()
        self._changed = threading.Condition()
        self._pid = None

    def watch(self, attempt):
        with self._changed:
            if self._pid != os.getpid():  # first use, or a forked child
                self._heap.clear()
                self._pid = os.getpid()
                threading.Thread(target=self._run, name="webhook-deadline",
                                 daemon=True).start()
            if not self._heap or attempt.deadline < self._heap[0][0]:
                self._changed.notify()  # else it wakes earlier anyway, for the first deadline
            heapq.heappush(self._heap, (attempt.deadline, next(self._order), attempt))

    def _run(self):
        while True:
            with self._changed:
                while not self._heap:
                    self._changed.wait()
                deadline, _, attempt = self._heap[0]
                if attempt.ended:
                    heapq.heappop(self._heap)
                    continue
                wait = deadline - time.monotonic()
                if wait > 0:
                    self._changed.wait(wait)
                    continue
                heapq.heappop(self._heap)
            attempt.cut_off()


_watchdog = _Watchdog()


class LeaseRanOut(Exception):
    """The attempt's latest start passed before its request was written:
    nothing was sent."""


class SwitchedProtocols(http.client.HTTPException):
    """The receiver answered 101 Switching Protocols, which no webhook asks for."""


MOST_INTERIM_ANSWERS = 16
"""Interim 1xx answers skipped before an answer; more fail the attempt."""


class _InterimSkippingResponse(http.client.HTTPResponse):
    """An answer read past the interim 1xx answers before it."""

    def _read_status(self):
        for _ in range(MOST_INTERIM_ANSWERS):
            version, status, reason = super()._read_status()
            if status == 101:
                raise SwitchedProtocols("the receiver switched protocols (HTTP 101)")
            if not 101 < status < 200:  # an answer, or a 100 (http.client skips it)
                return version, status, reason
            http.client._read_headers(self.fp)  # an interim answer's header section
        raise http.client.HTTPException(
            f"more than {MOST_INTERIM_ANSWERS} interim 1xx answers")


@contextlib.contextmanager
def attempt_deadline(seconds, start_by=None):
    """Cut off every connection this thread uses for an attempt after
    ``seconds``; write no request after ``start_by`` (a ``time.monotonic()``;
    None: any time before the deadline).

    Yields the attempt; its ``cut`` tells whether the deadline cut it off,
    its ``written`` whether a request was begun. End it (``attempt.end()``)
    as soon as the answer is read, before the connection is given back to
    the pool.
    """
    attempt = _Attempt(time.monotonic() + seconds, start_by)
    _current.attempt = attempt
    _watchdog.watch(attempt)
    try:
        yield attempt
    finally:
        _current.attempt = None
        attempt.end()


def _guard(sock):
    """Put ``sock`` under the deadline of this thread's attempt, if any."""
    attempt = getattr(_current, "attempt", None)
    if attempt is None or sock is None:
        return
    with attempt.lock:
        attempt.sockets.append(sock)
        late = attempt.cut
    if late or time.monotonic() >= attempt.deadline:
        attempt.cut_off()


def _before_writing():
    """Refuse to write a request after this thread's attempt's latest start;
    else note that its first byte may leave from now on."""
    attempt = getattr(_current, "attempt", None)
    if attempt is None:
        return
    if attempt.start_by is not None and time.monotonic() > attempt.start_by:
        raise LeaseRanOut("its lease ran out before the request was written")
    attempt.written = True


class _GuardedConnection(HTTPConnection):
    response_class = _InterimSkippingResponse

    def connect(self):
        super().connect()
        _guard(self.sock)

    def request(self, *args, **kwargs):
        _guard(self.sock)  # a kept-alive connection: connect() is not called again
        _before_writing()
        return super().request(*args, **kwargs)


class _GuardedTLSConnection(HTTPSConnection):
    response_class = _InterimSkippingResponse

    def connect(self):
        super().connect()
        _guard(self.sock)

    def request(self, *args, **kwargs):
        _guard(self.sock)
        _before_writing()
        return super().request(*args, **kwargs)


class _GuardedPool(HTTPConnectionPool):
    ConnectionCls = _GuardedConnection


class _GuardedTLSPool(HTTPSConnectionPool):
    ConnectionCls = _GuardedTLSConnection


class DeadlineAdapter(HTTPAdapter):
    """requests' adapter (keep-alive pool per receiver) whose connections obey
    ``attempt_deadline``."""

    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _GuardedPool,
                                                   "https": _GuardedTLSPool}
