"""A hard wall-clock deadline on a whole HTTP attempt, headers and body included.

requests' read timeout bounds each socket read, not the answer: a receiver
that trickles a byte per read timeout never times out. Here, the socket of
an attempt is handed to one watchdog thread per process as soon as the
attempt has it (on connect, and on each request over a kept-alive
connection); at the attempt's deadline the watchdog shuts the socket down,
so the read blocked on it returns at once and the attempt fails. A socket
whose attempt ended in time goes back to the pool untouched.

``DeadlineAdapter`` is the requests transport adapter whose connections do
this; wrap each attempt in ``attempt_deadline(seconds)``.
"""
import contextlib
import heapq
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

    def __init__(self, deadline):
        self.deadline = deadline
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


@contextlib.contextmanager
def attempt_deadline(seconds):
    """Cut off every connection this thread uses for an attempt after ``seconds``.

    Yields the attempt; its ``cut`` tells whether the deadline cut it off.
    End it (``attempt.end()``) as soon as the answer is read, before the
    connection is given back to the pool.
    """
    attempt = _Attempt(time.monotonic() + seconds)
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


class _GuardedConnection(HTTPConnection):
    def connect(self):
        super().connect()
        _guard(self.sock)

    def request(self, *args, **kwargs):
        _guard(self.sock)  # a kept-alive connection: connect() is not called again
        return super().request(*args, **kwargs)


class _GuardedTLSConnection(HTTPSConnection):
    def connect(self):
        super().connect()
        _guard(self.sock)

    def request(self, *args, **kwargs):
        _guard(self.sock)
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
