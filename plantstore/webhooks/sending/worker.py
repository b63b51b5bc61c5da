"""The delivery worker: claim what is due, attempt it, record what happened.

Any number of workers, on any number of machines, may share one database.
A worker claims due deliveries for its free slots (``WORKER_THREADS``,
shared fairly between receivers and owners) and more to wait for a slot
(see ``Slots``), fairly across subscriptions and owners (see
``queue.claim``). A sender whose attempt ends takes the next waiting job at
once (within its owner's share beside one more owner), so senders never
wait for a claim; the claiming loop starts the rest after each claim.
The worker claims again when attempts end, but no sooner than
``WORKER_CLAIM_COOLDOWN`` after its last claim (River's fetch cooldown),
or once as many ended as may wait for one receiver: the room freed
meanwhile is filled by one claim. While its outcome writer holds more than
its bound of unwritten outcomes, it claims nothing until they drain
(``OutcomeWriter.backlogged``). Claimed rows are leased by the database's
clock and fenced by a token, so no event is sent twice at once, whatever
the hosts' clocks say; an attempt starts only while its lease outlasts it
(``Job.may_start``), else it is given back. While a receiver's circuit
breaker is open, its deliveries wait; one probe attempt per cooldown goes
out (see ``rules``). Between claims the worker runs the housekeeping it was given
(``plantstore/housekeeping/``).
"""
import collections
import concurrent.futures
import logging
import random
import threading
import time

from ...db import clock, database, faults, is_unavailable
from ..engine import queue, throttle
from . import descriptors, own_trouble, spans
from .attempt import FINISH_MARGIN_SECONDS, attempt_and_put
from .outcome_writer import OutcomeWriter
from .slots import Slots

log = logging.getLogger(__name__)

WAKE_SECONDS = 0.25
"""Longest the claiming loop waits for an attempt to end before it looks
again (for a stop, and for deliveries that came due)."""


def idle_wait(poll_interval):
    """How long an idle worker sleeps before it polls again: a random 75 to
    100 % of ``poll_interval``. Workers started together would otherwise poll
    in step, and the one whose poll comes first after a delivery falls due
    would take nearly every one of them; never longer than the interval, so
    a due delivery still waits at most that long."""
    return poll_interval * random.uniform(0.75, 1.0)


class Worker:
    """Delivers due deliveries until told to stop, ``worker_threads`` at once at most."""

    def __init__(self, settings, housekeeping):
        self.settings = settings
        self.housekeeping = housekeeping  # run between claims (plantstore/housekeeping/)
        self.stopping = threading.Event()
        self.tally = collections.Counter()  # outcome kinds, counted by the writer's thread
        self.slots = Slots(settings.worker_threads, settings.sends_per_receiver, ahead=True,
                           send_bound=settings.send_bound)
        self.writer = OutcomeWriter(settings, on_written=self._count)
        self._pool = concurrent.futures.ThreadPoolExecutor(
            settings.worker_threads, thread_name_prefix="webhook-send")
        self._last_claim = float("-inf")  # time.monotonic() of the last claim
        self._releases_at_claim = 0  # Slots' releases when the last claim's room was read
        self._trouble = None  # why the database could not serve the last claim

    def _count(self, kinds):
        self.tally.update(kind or "unrecorded" for kind in kinds)

    def stop(self):
        """Start no more attempts; those under way end by their deadline
        (safe from a signal handler)."""
        self.stopping.set()

    def _cool_down(self):
        """Wait until the claim cooldown since the last claim has passed, or
        as many attempts as may wait for one receiver ended since (a claim's
        worth of room freed), or a stop."""
        while not self.stopping.is_set():
            left = self._last_claim + self.settings.claim_cooldown - time.monotonic()
            if left <= 0 or self.slots.wait_for_release(
                    self._releases_at_claim, min(left, WAKE_SECONDS),
                    count=self.slots.waiting_per_receiver):
                return

    def _claim(self, room, due_by):
        """Claim for ``room``; the jobs, and the ids of the throttled
        receivers among them (claimed only for free slots)."""
        self._last_claim, self._releases_at_claim = time.monotonic(), room.releases
        with spans.claim_span() as span:
            limit = min(room.free, self.settings.batch_size)
            slot_room = self.slots.room(for_waiting=False)
            caps = throttle.take_for_claim(slot_room, min(slot_room.free, limit), due_by)
            left_to_others = dict.fromkeys(own_trouble.avoided(), 0)
            jobs = queue.claim(limit, self.settings,
                               room.subscription_default, room.owner_default,
                               {**room.subscriptions, **caps, **left_to_others}, room.owners,
                               due_by=due_by)
            jobs = throttle.settle(caps, jobs, self.writer.give_back)
            span.claimed(job.traceparent for job in jobs)
        if self._trouble is not None:
            log.info("webhook worker: the database serves again")
            self._trouble = None
        return jobs, caps.keys()

    def _start(self, jobs, throttled):
        """Start each job's attempt, or let it wait for a slot (behind the
        jobs already waiting for its receiver); give back those that may do
        neither (a throttled receiver's token and an open breaker's probe
        are for now, not for later)."""
        for job in jobs:
            placed = None
            if not self.stopping.is_set() and job.may_start(self.settings.send_bound):
                placed = self.slots.take_or_wait(job, may_wait=not (
                    job.breaker_open or job.subscription_id in throttled))
            if placed == "slot":
                self._pool.submit(self._attempts, job, job.subscription_id in throttled)
            elif placed is None:
                self.writer.give_back(job)

    def _start_waiting(self):
        """Start the waiting jobs a slot frees for now; give back those whose
        lease ran short."""
        started, stale = self.slots.start_waiting()
        for job in stale:
            self.writer.give_back(job)
        for job in started:
            self._pool.submit(self._attempts, job)

    def _attempts(self, job, token_taken=False):
        """Attempt ``job`` (``token_taken``: its throttled receiver's token was
        taken for it by the claim), then each waiting job its slot is handed
        to (never a throttled receiver's)."""
        while job is not None:
            try:
                delivered = attempt_and_put(job, self.settings, self.writer,
                                            token_taken=token_taken)
            except Exception:  # its lease runs out: a worker retries it
                log.exception("delivery %s: the attempt could not be made", job.delivery_id)
                delivered = False
            job, stale = self.slots.release(job, failed=not delivered,
                                            take_next=not self.stopping.is_set())
            token_taken = False
            for waiting in stale:
                self.writer.give_back(waiting)

    def _deliver(self, due_by, until_idle):
        """Claim and attempt due deliveries until stopped (or, with
        ``until_idle``, until nothing is due and nothing is under way)."""
        while not self.stopping.is_set():
            if self.writer.backlogged():  # back-pressure: let the outcomes drain first
                self.writer.flush(self.settings.send_bound + FINISH_MARGIN_SECONDS)
                continue
            self._cool_down()
            room = self.slots.room()
            limit = min(room.free, self.settings.batch_size)
            busy = self.slots.held() or self.slots.waiting() or self.writer.unwritten()
            jobs, throttled = self._claim(room, due_by) if limit else ([], ())
            self._start(jobs, throttled)
            self._start_waiting()  # on the slots the claim's jobs left
            if limit and len(jobs) == limit:
                continue  # there may be more, for other receivers
            self.housekeeping.run_if_due(self.settings)
            if self.slots.held():
                self.slots.wait_for_release(room.releases, WAKE_SECONDS)
            elif jobs or self.slots.waiting():
                continue  # they ended already, or wait for slots freed since: look again
            elif busy or self.writer.unwritten():
                # Their rows are leased until written; once they are, what
                # the claim skipped (a receiver at its cap, an open breaker
                # a success closed) can be claimed, even when they ended
                # and were written while the claim ran.
                self.writer.flush(self.settings.send_bound + FINISH_MARGIN_SECONDS)
            elif until_idle:
                return
            else:
                self.stopping.wait(idle_wait(self.settings.poll_interval))

    def _finish(self):
        """Wait for attempts under way (they end by their deadline) and their outcomes."""
        bound = self.settings.send_bound + FINISH_MARGIN_SECONDS
        for job in self.slots.give_up_waiting():
            self.writer.give_back(job)
        try:
            if not (self.slots.wait_until_idle(bound) and self.writer.flush(bound)):
                log.warning("webhook outcomes still unwritten at exit; their leases will "
                            "run out and the workers retry those deliveries")
        finally:
            self._pool.shutdown(wait=False)
            database.close()

    def run_once(self):
        """Deliver what was due when called, then return the tally of outcomes.

        Retries scheduled during the run wait for a later run, so the call
        ends even when a receiver keeps failing with a zero delay.
        """
        try:
            self.housekeeping.run_if_due(self.settings, force=True)
            self._deliver(due_by=clock.read(), until_idle=True)
        finally:
            self._finish()
        return self.tally

    def _note_trouble(self, error):
        """Say what stopped the claiming loop: a database that cannot serve (down,
        or its schema unfit) in one line when that starts or changes, not at
        every poll; a bug with its traceback."""
        if is_unavailable(error):
            trouble, detail = "unavailable", (str(error).strip().splitlines() or [""])[0]
        else:
            trouble = detail = faults.schema_fault()
        if trouble is None:
            log.error("webhook worker: claiming deliveries failed; retrying after the "
                      "poll interval", exc_info=error)
            return
        if trouble != self._trouble:
            log.warning("webhook worker: the database cannot serve (%s); trying again every "
                        "%gs", detail or type(error).__name__, self.settings.poll_interval)
        self._trouble = trouble

    def run_forever(self):
        """Poll for due deliveries until ``stop``; returns the tally."""
        descriptors.start(self.settings.idle_connection_seconds)
        limit, kept = descriptors.limits()
        log.info("webhook worker started (poll every %gs, %d attempts at once, %d file "
                 "descriptors: at most %d idle connections kept)",
                 self.settings.poll_interval, self.settings.worker_threads, limit, kept)
        try:
            while not self.stopping.is_set():
                try:
                    self._deliver(due_by=None, until_idle=False)
                except Exception as error:
                    self._note_trouble(error)
                    database.close()
                    self.stopping.wait(self.settings.poll_interval)
        finally:
            self._finish()
        log.info("webhook worker stopped: %s", dict(self.tally) or "nothing delivered")
        return self.tally
