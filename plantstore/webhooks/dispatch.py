"""Making attempts: a bounded set of sender threads per process, and one
writer thread that records their outcomes in batches.

A ``Dispatcher`` makes at most ``threads`` attempts at once, and at most
``per_receiver`` at one subscription. ``try_start`` never waits: a job that
finds no free slot is refused, and the caller leaves it to the workers (a
web process) or does not claim it (a worker). Sender threads never touch the
database: each result goes to the ``OutcomeWriter``, whose single thread
writes everything that has accumulated in one transaction, so the webhook
sending of one process holds at most one database connection.
"""
import collections
import concurrent.futures
import logging
import os
import threading
import time

from .. import metrics
from ..models import utcnow
from . import outcomes, sender

log = logging.getLogger(__name__)

WRITER_IDLE_SECONDS = 5.0
"""An outcome writer thread with nothing to write for this long ends (a new
one starts with the next outcome)."""

LARGEST_WRITE = 500
"""Most outcomes written in one transaction."""

GATHER_SECONDS = 0.005
"""Longest a failed attempt's outcome waits for the attempts still under way
to end, so that their outcomes share its transaction (it never waits when
none are): it holds its receiver's slot until written."""

FINISH_MARGIN_SECONDS = 10
"""How long past the attempt deadline a stopping process waits for the
outcomes of its last attempts to be written."""

LINGER_SECONDS = 0.02
"""Longest delivered attempts' outcomes (and leases given back) wait for
others to share their transaction; their slots are free already, and their
rows stay leased meanwhile, so nobody sends them again."""


def attempt(job, settings):
    """One attempt at ``job``: its ``SendResult``, never an exception."""
    started_at, clock = utcnow(), time.monotonic()
    try:
        return sender.send(job, settings)
    except Exception as error:  # a bug must not lose the delivery: it is retried
        log.exception("delivery %s: the attempt could not be made", job.delivery_id)
        return sender.SendResult(started_at, int((time.monotonic() - clock) * 1000),
                                 error=f"{type(error).__name__}: {error}"[:500])


def deliver_now(job, settings):
    """Attempt ``job`` in this thread and record the outcome; its kind."""
    return outcomes.record_outcomes([(job, attempt(job, settings))], settings)[0]


class OutcomeWriter:
    """Writes attempts' outcomes, and leases given back, in batches from one thread.

    ``on_written(batch, kinds)`` is called after each batch of outcomes
    (``(job, result)`` pairs), with the kinds written (all None if the batch
    could not be written: its leases run out and the workers retry those
    deliveries, never lost). ``attempts_unwritten()`` says how many attempts
    are under way or have their outcome waiting here.

    A batch is written once a failure is waiting and no attempt is still
    under way (or GATHER_SECONDS after it came), else LINGER_SECONDS after
    its first outcome, or at once when LARGEST_WRITE are waiting or someone
    flushes: a busy process writes many outcomes per transaction, not one.
    """

    def __init__(self, settings, on_written, attempts_unwritten):
        self.settings = settings
        self.on_written = on_written
        self.attempts_unwritten = attempts_unwritten
        self._changed = threading.Condition()
        self._outcomes, self._releases = [], []
        self._unwritten = 0
        self._failures_waiting = 0
        self._flushes = 0
        self._thread = None
        self._pid = None

    def put_outcome(self, job, result):
        self._put(job, result)

    def put_release(self, job):
        self._put(job)

    def _put(self, job, result=None):
        with self._changed:
            if self._pid != os.getpid():  # first use, or a forked child
                self._outcomes, self._releases, self._unwritten = [], [], 0
                self._failures_waiting = 0
                self._thread, self._pid = None, os.getpid()
            if result is None:
                self._releases.append(job)
            else:
                self._outcomes.append((job, result))
                self._failures_waiting += not result.ok
            self._unwritten += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="webhook-outcomes",
                                                daemon=True)
                self._thread.start()
            if self._may_end_wait():
                self._changed.notify_all()

    def _may_end_wait(self):
        """Whether what was just put may end the writer's wait: the first of a
        batch starts its gathering, a failure waiting is written once no
        attempt is under way (see ``_write_due``); others join the batch as
        it gathers, without waking the writer thread."""
        waiting = len(self._outcomes) + len(self._releases)
        return waiting == 1 or self._failures_waiting or waiting >= LARGEST_WRITE

    def flush(self, timeout):
        """Wait until everything put so far is written; False on timeout."""
        with self._changed:
            self._flushes += 1
            self._changed.notify_all()
            try:
                return self._changed.wait_for(lambda: self._unwritten == 0, timeout)
            finally:
                self._flushes -= 1

    def _run(self):
        while True:
            with self._changed:
                if not self._changed.wait_for(lambda: self._outcomes or self._releases,
                                              WRITER_IDLE_SECONDS):
                    self._thread = None
                    return
                self._gather()
                batch = self._outcomes[:LARGEST_WRITE]
                del self._outcomes[:LARGEST_WRITE]
                self._failures_waiting = sum(not result.ok for _, result in self._outcomes)
                releases, self._releases = self._releases, []
            try:
                self._write(batch, releases)
            finally:
                with self._changed:
                    self._unwritten -= len(batch) + len(releases)
                    self._changed.notify_all()

    def _gather(self):
        """Wait (holding the lock) until what is waiting should be written."""
        began = time.monotonic()
        while not self._write_due():
            window = GATHER_SECONDS if self._failures_waiting else LINGER_SECONDS
            left = began + window - time.monotonic()
            if left <= 0:
                return
            self._changed.wait(left)

    def _write_due(self):
        if self._flushes or len(self._outcomes) >= LARGEST_WRITE:
            return True
        return bool(self._failures_waiting) and len(self._outcomes) >= self.attempts_unwritten()

    def _write(self, batch, releases):
        kinds = [None] * len(batch)
        try:
            if releases:
                outcomes.release(releases)
            if batch:
                kinds = outcomes.record_outcomes(batch, self.settings)
        except Exception:
            log.exception("webhook outcomes of deliveries %s could not be written; "
                          "their leases will run out and the workers retry them",
                          [job.delivery_id for job, _ in batch]
                          + [job.delivery_id for job in releases])
        finally:
            if batch:
                self.on_written(batch, kinds)


class Dispatcher:
    """Sender threads with a cap per process and per receiver, feeding one
    ``OutcomeWriter``. A failed attempt holds its slot until its outcome is
    written, so the next attempt at that receiver sees what it did to the
    breaker (or to the subscription: a 410 disables it); a delivered one
    frees its slot as soon as it ends, since a success changes nothing the
    next attempt must see (an open breaker's probe keeps the others waiting
    on the row until its outcome is written).

    ``on_recorded(kinds)`` (optional) is called with the outcome kinds of
    each batch written.
    """

    def __init__(self, settings, threads, per_receiver, on_recorded=None):
        self.settings = settings
        self.threads = threads
        self.per_receiver = per_receiver
        self.on_recorded = on_recorded
        self.writer = OutcomeWriter(settings, self._written, self.in_flight)
        self._changed = threading.Condition()
        self._busy = collections.Counter()  # subscription id -> slots held
        self._unwritten = 0  # attempts under way or waiting for their outcome's write
        self._executor = None
        self._pid = None

    def in_flight(self):
        """Attempts under way or waiting for their outcome to be written."""
        with self._changed:
            return self._unwritten

    def room(self):
        """(attempts that may start now, {subscription id: room left} for
        receivers whose attempts hold slots)."""
        with self._changed:
            free = self.threads - sum(self._busy.values())
            return free, {sid: self.per_receiver - n for sid, n in self._busy.items()}

    def try_start(self, job):
        """Start an attempt at ``job`` if a slot is free; whether it started."""
        with self._changed:
            executor = self._executor_of_this_process()
            if (sum(self._busy.values()) >= self.threads
                    or self._busy[job.subscription_id] >= self.per_receiver):
                return False
            self._busy[job.subscription_id] += 1
            self._unwritten += 1
        executor.submit(self._attempt, job)
        return True

    def send_or_leave(self, jobs):
        """Start every job that finds a slot; give the others back to the workers."""
        for job in jobs:
            try:
                started = self.try_start(job)
            except Exception:  # runs after a commit: the create must not fail now
                log.exception("delivery %s: could not start its attempt", job.delivery_id)
                started = False
            if not started:
                metrics.count_left_to_worker("busy")
                self.writer.put_release(job)

    def wait_for_change(self, timeout):
        """Wait until an attempt frees its slot or has its outcome written;
        False if ``timeout`` seconds passed first."""
        with self._changed:
            return self._changed.wait(timeout)

    def finish(self):
        """Before the process stops: wait for the attempts under way (each ends
        by its deadline) and their outcomes, at most the deadline plus
        FINISH_MARGIN_SECONDS. Outcomes left unwritten are logged: their
        leases run out and the workers retry those deliveries."""
        if not self.drain(self.settings.send_bound + FINISH_MARGIN_SECONDS):
            log.warning("webhook outcomes still unwritten at exit; their leases will "
                        "run out and the workers retry those deliveries")

    def drain(self, timeout):
        """Wait for the attempts under way and their outcomes; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._changed:
            if not self._changed.wait_for(lambda: not self._unwritten, timeout):
                return False
        return self.writer.flush(max(0.0, deadline - time.monotonic()))

    def _executor_of_this_process(self):
        if self._pid != os.getpid():  # first use, or a forked child
            self._executor = concurrent.futures.ThreadPoolExecutor(
                self.threads, thread_name_prefix="webhook-send")
            self._busy.clear()
            self._unwritten = 0
            self._pid = os.getpid()
        return self._executor

    def _attempt(self, job):
        result = attempt(job, self.settings)
        self.writer.put_outcome(job, result)
        if result.ok:
            with self._changed:
                self._free_slot(job)
                self._changed.notify_all()

    def _free_slot(self, job):
        self._busy[job.subscription_id] -= 1
        if not self._busy[job.subscription_id]:
            del self._busy[job.subscription_id]

    def _written(self, batch, kinds):
        """Count the outcomes written, and free the slots failed attempts held."""
        with self._changed:
            for job, result in batch:
                if not result.ok:
                    self._free_slot(job)
            self._unwritten -= len(batch)
            self._changed.notify_all()
        if self.on_recorded:
            self.on_recorded(kinds)
