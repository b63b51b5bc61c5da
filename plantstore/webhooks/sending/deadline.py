"""A hard wall-clock deadline on a whole HTTP attempt, headers and body included.

requests' read timeout bounds each socket read, not the answer: a receiver
that trickles a byte per read timeout never times out. Here, the socket of
an attempt is handed to one watchdog thread per process as soon as the
attempt has it (on connect, and on each request over a kept-alive
connection); at the attempt's deadline the watchdog shuts the socket down,
so the read blocked on it returns at once and the attempt fails. A socket
whose attempt ended in time goes back to the pool untouched.

An attempt may also have a latest start (its lease's) and a check of its
own (``still_current``): once its connection is made, just before its
request is written, a request past its latest start is not written at all
(``LeaseRanOut``), nor one its check refuses (a ``NotWritten``). So a
process that was stopped after building a request and woke after its lease
ran out sends nothing, and neither does one whose receiver was slow to
accept while the subscription changed.

The connections of ``guarded`` obey this; wrap each attempt in
``attempt_deadline(seconds, start_by, still_current)``.
"""
import contextlib
import heapq
import itertools
import os
import socket
import threading
import time

_current = threading.local()


class _Attempt:
    """One attempt under way: its deadline and the sockets it uses."""

    def __init__(self, deadline, start_by, still_current):
        self.deadline = deadline
        self.start_by = start_by  # time.monotonic() after which no request is written
        self.still_current = still_current  # raises NotWritten if it must not be written
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


class NotWritten(Exception):
    """A check just before the request was written refused it: nothing was sent."""


class LeaseRanOut(NotWritten):
    """The attempt's latest start passed before its request was written."""


@contextlib.contextmanager
def attempt_deadline(seconds, start_by=None, still_current=None):
    """Cut off every connection this thread uses for an attempt after
    ``seconds``; write no request after ``start_by`` (a ``time.monotonic()``;
    None: any time before the deadline), nor when ``still_current()``, called
    once connected, raises.

    Yields the attempt; its ``cut`` tells whether the deadline cut it off,
    its ``written`` whether a request was begun. End it (``attempt.end()``)
    as soon as the answer is read, before the connection is given back to
    the pool.
    """
    attempt = _Attempt(time.monotonic() + seconds, start_by, still_current)
    _current.attempt = attempt
    _watchdog.watch(attempt)
    try:
        yield attempt
    finally:
        _current.attempt = None
        attempt.end()


def guard(sock):
    """Put ``sock`` under the deadline of this thread's attempt, if any."""
    attempt = getattr(_current, "attempt", None)
    if attempt is None or sock is None:
        return
    with attempt.lock:
        attempt.sockets.append(sock)
        late = attempt.cut
    if late or time.monotonic() >= attempt.deadline:
        attempt.cut_off()


def before_writing():
    """Refuse to write a request after this thread's attempt's latest start,
    or one its check refuses; else note that its first byte may leave from
    now on. Called once connected."""
    attempt = getattr(_current, "attempt", None)
    if attempt is None:
        return
    if attempt.start_by is not None and time.monotonic() > attempt.start_by:
        raise LeaseRanOut("its lease ran out before the request was written")
    if attempt.still_current is not None:
        attempt.still_current()
    attempt.written = True
