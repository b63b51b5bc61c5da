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

LEASE_MARGIN_SECONDS = 0.5
"""How long a job's lease must outlast its attempt's deadline for it to start
after waiting for a slot: its outcome is written inside the lease, so no
other sender can take the row while the attempt is under way."""

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
    deliveries, never lost); ``on_released(jobs)`` after leases given back
    were written (or could not be: they run out). ``attempts_unwritten()``
    says how many attempts are under way or have their outcome waiting here.

    A batch is written once a failure is waiting and no attempt is still
    under way (or GATHER_SECONDS after it came), else LINGER_SECONDS after
    its first outcome, or at once when LARGEST_WRITE are waiting or someone
    flushes: a busy process writes many outcomes per transaction, not one.
    """

    def __init__(self, settings, on_written, on_released, attempts_unwritten):
        self.settings = settings
        self.on_written = on_written
        self.on_released = on_released
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
            if releases:
                self.on_released(releases)
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

    With ``queue_ahead`` (a worker's), it also takes up to ``per_receiver``
    jobs per receiver (and ``threads`` in all) beyond its slots: they wait
    here and start the moment a slot they fit frees (a delivered attempt's
    sender thread takes the next one at once, of its own receiver first),
    so senders keep sending while the worker claims more. They are given back to the workers unsent when
    their receiver fails an attempt (the next claim sees the breaker), when
    their lease would not outlast the attempt by LEASE_MARGIN_SECONDS, and
    once ``stop_starting`` is called. A web process's dispatcher never
    queues: a job without a slot is refused.

    ``on_recorded(kinds)`` (optional) is called with the outcome kinds of
    each batch written.
    """

    def __init__(self, settings, threads, per_receiver, on_recorded=None, queue_ahead=False):
        self.settings = settings
        self.threads = threads
        self.per_receiver = per_receiver
        self.on_recorded = on_recorded
        self.ahead = per_receiver if queue_ahead else 0  # waiting jobs per receiver
        self.queue_limit = threads if queue_ahead else 0  # waiting jobs in all
        self.receiver_room = per_receiver + self.ahead
        """How many jobs it takes for a receiver that has none under way or waiting."""
        self.writer = OutcomeWriter(settings, self._written, self._released,
                                    self._attempts_unwritten)
        self._changed = threading.Condition()
        self._busy = collections.Counter()  # subscription id -> slots held
        self._waiting = {}  # subscription id -> deque of jobs waiting for a slot
        self._waiting_count = 0
        self._unwritten = 0  # attempts under way or waiting for their outcome's write
        self._giving_back = set()  # delivery ids of jobs given back, release not yet written
        self._starting = True
        self._executor = None
        self._pid = None

    def in_flight(self):
        """Jobs waiting for a slot, attempts under way or waiting for their
        outcome to be written, and jobs given back whose release is not yet
        written (their rows are still leased)."""
        with self._changed:
            return self._unwritten + self._waiting_count + len(self._giving_back)

    def _attempts_unwritten(self):
        with self._changed:
            return self._unwritten

    def room(self):
        """(jobs it takes now, {subscription id: jobs it takes for that
        receiver} for receivers with slots held or jobs waiting); any other
        receiver takes ``receiver_room``."""
        with self._changed:
            taken = collections.Counter(self._busy)
            for subscription_id, jobs in self._waiting.items():
                taken[subscription_id] += len(jobs)
            free = self.threads + self.queue_limit - sum(taken.values())
            return free, {sid: self.receiver_room - n for sid, n in taken.items()}

    def try_start(self, job):
        """Start an attempt at ``job`` if a slot is free, or queue it when
        queuing ahead and there is room; whether it took the job."""
        with self._changed:
            executor = self._executor_of_this_process()
            receiver = job.subscription_id
            if (sum(self._busy.values()) < self.threads
                    and self._busy[receiver] < self.per_receiver):
                self._busy[receiver] += 1
                self._unwritten += 1
            elif (self._starting and self._waiting_count < self.queue_limit
                  and len(self._waiting.get(receiver, ())) < self.ahead):
                self._waiting.setdefault(receiver, collections.deque()).append(job)
                self._waiting_count += 1
                return True
            else:
                return False
        executor.submit(self._attempt, job)
        return True

    def stop_starting(self):
        """Start no waiting job from now on (safe from a signal handler: the
        jobs are given back when the dispatcher finishes)."""
        self._starting = False

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
                self.give_back([job])

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
        self.stop_starting()
        with self._changed:
            unsent = self._drop_waiting(list(self._waiting))
        self._put_releases(unsent)
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
            self._waiting.clear()
            self._waiting_count = 0
            self._giving_back.clear()
            self._unwritten = 0
            self._pid = os.getpid()
        return self._executor

    def _attempt(self, job):
        """Attempt ``job``, then, while they succeed, the jobs waiting for its
        receiver's slot (a failure holds the slot until written: see ``_written``)."""
        while job is not None:
            result = attempt(job, self.settings)
            self.writer.put_outcome(job, result)
            if not result.ok:
                return
            with self._changed:
                self._free_slot(job)
                job, unsent = self._take_waiting(job.subscription_id)
                self._changed.notify_all()
            self._put_releases(unsent)

    def _free_slot(self, job):
        self._busy[job.subscription_id] -= 1
        if not self._busy[job.subscription_id]:
            del self._busy[job.subscription_id]

    def _take_waiting(self, freed):
        """After a slot of receiver ``freed`` was freed: (the next waiting job
        that fits now, ``freed``'s own first, with its slot taken, or None;
        the jobs to give back unsent). Lock held."""
        unsent = []
        for receiver in [freed, *self._waiting]:
            jobs = self._waiting.get(receiver)
            while (jobs and self._busy[receiver] < self.per_receiver
                   and sum(self._busy.values()) < self.threads):
                job = jobs.popleft()
                self._waiting_count -= 1
                if not jobs:
                    del self._waiting[receiver]
                time_left = (job.leased_until - utcnow()).total_seconds()
                if self._starting and time_left > self.settings.send_bound + LEASE_MARGIN_SECONDS:
                    self._busy[receiver] += 1
                    self._unwritten += 1
                    return job, unsent
                unsent.append(job)
                self._giving_back.add(job.delivery_id)
        return None, unsent

    def _drop_waiting(self, receivers):
        """Take the jobs waiting for ``receivers`` out of the queue, counted as
        given back until their release is written. Lock held."""
        dropped = [job for receiver in receivers for job in self._waiting.pop(receiver, ())]
        self._waiting_count -= len(dropped)
        self._giving_back.update(job.delivery_id for job in dropped)
        return dropped

    def give_back(self, jobs):
        """Give leased jobs that will not be attempted back to the workers."""
        with self._changed:
            self._giving_back.update(job.delivery_id for job in jobs)
        self._put_releases(jobs)

    def _put_releases(self, jobs):
        """Have the writer release jobs already counted in ``_giving_back``."""
        for job in jobs:
            self.writer.put_release(job)

    def _released(self, jobs):
        with self._changed:
            self._giving_back.difference_update(job.delivery_id for job in jobs)
            self._changed.notify_all()

    def _written(self, batch, kinds):
        """Count the outcomes written, and free the slots failed attempts held.

        The jobs waiting for a receiver that just failed are given back
        unsent: they were claimed before the failure, and the next claim
        sees what it did to the breaker (or to the subscription). The slots
        freed start jobs waiting for other receivers.
        """
        unsent, starts = [], []
        with self._changed:
            for job, result in batch:
                if not result.ok:
                    self._free_slot(job)
                    unsent += self._drop_waiting([job.subscription_id])
                    start, too_late = self._take_waiting(job.subscription_id)
                    unsent += too_late
                    if start is not None:
                        starts.append(start)
            self._unwritten -= len(batch)
            self._changed.notify_all()
        self._put_releases(unsent)
        for job in starts:
            self._executor.submit(self._attempt, job)
        if self.on_recorded:
            self.on_recorded(kinds)
