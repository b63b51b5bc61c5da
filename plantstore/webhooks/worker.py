"""The delivery worker: claim what is due, attempt it, record what happened.

Any number of workers, on any number of machines, may share one database.
A worker claims deliveries by leasing them (``locked_until``) in one short
transaction: on PostgreSQL the candidate rows are locked with ``FOR UPDATE
SKIP LOCKED``, so concurrent workers take disjoint sets without waiting; on
SQLite the transaction begins IMMEDIATE, so claims run one at a time. Rows
under a lease (being sent by a web process or another worker) are never
claimed, so no event is sent twice at once.

A worker claims as many deliveries as it has free sender threads, and as
many again to wait for a slot, per receiver at most twice that receiver's
cap (see ``Dispatcher``): a waiting one starts as soon as a slot it fits
frees, and only while its lease outlasts the attempt, so every attempt ends
by its deadline inside its lease. It claims again as soon as attempts
end, never waiting for a whole batch: a slow receiver holds its own slots
and the deliveries waiting for them, not the others' deliveries.
While a receiver's circuit breaker is open, its deliveries wait; one probe
attempt per cooldown goes out (see ``breaker``).
"""
import collections
import datetime
import logging
import threading
import time

from ..db import database
from ..idempotency import purge_expired_keys
from ..models import Delivery, Subscription, utcnow
from . import lifecycle, queue_queries
from .dispatch import Dispatcher
from .jobs import JobRow, job_from_row, job_of
from .outcomes import commit_without_flush

log = logging.getLogger(__name__)

WAKE_SECONDS = 0.25
"""Longest the claiming loop sleeps between checks for stopping and for free slots."""
CLAIM_GATHER_SECONDS = 0.003
"""How long the claiming loop lets attempts end after the first one did,
while others are under way, so that one claim (a transaction) starts several
attempts instead of one each."""
HOUSEKEEPING_SECONDS = 10
"""How often an idle worker purges what outlived its keep."""
HOUSEKEEPING_BATCHES = 20
"""Most purge batches one round of housekeeping deletes."""


def _lease_free(now):
    return Delivery.locked_until.is_null() | (Delivery.locked_until <= now)


def _take_probe(subscription_id, now, settings):
    """Reserve the next probe of an open breaker; whether this claim got it."""
    next_probe = now + datetime.timedelta(seconds=settings.breaker_cooldown)
    return (Subscription.update(breaker_probe_at=next_probe)
            .where(Subscription.id == subscription_id,
                   Subscription.breaker_probe_at <= now)
            .execute()) == 1


def claim_due(limit, settings, due_by=None, room=None, receiver_room=None):
    """Lease up to ``limit`` pending deliveries due by ``due_by`` (default now)
    to this worker; returns their jobs, most overdue first.

    ``room`` maps subscription ids to how many more jobs this worker takes
    for them; ``receiver_room`` (default: the per-receiver cap) for the
    others. A receiver whose breaker is open gets one delivery, its probe,
    when the probe is due.
    """
    now = utcnow()
    room = room or {}
    leased_until = now + datetime.timedelta(seconds=settings.lease_seconds)
    full = [sid for sid, left in room.items() if left <= 0]
    with database.atomic():
        commit_without_flush()  # a lease lost in a crash only frees the rows early
        taken = collections.Counter()
        claimed = []
        for row in map(JobRow._make, queue_queries.due(limit, due_by or now, now, full)):
            if row.breaker_is_open:
                if taken[row.subscription_id] or not _take_probe(row.subscription_id, now,
                                                                 settings):
                    continue
            elif taken[row.subscription_id] >= room.get(
                    row.subscription_id, receiver_room or settings.sends_per_receiver):
                continue
            taken[row.subscription_id] += 1
            claimed.append(row)
        if not claimed:
            return []
        queue_queries.lease([row.delivery_id for row in claimed], leased_until)
        return [job_from_row(row, leased_until, now) for row in claimed]


class ClaimRefused(Exception):
    """A delivery cannot be re-sent now; the message says why."""


def claim_for_retry(delivery_id, settings):
    """Lease one failed (or waiting) delivery for an immediate re-send.

    It starts over on the retry schedule: if this attempt fails, the retries
    follow as for a new event, under the same webhook-id.
    """
    now = utcnow()
    leased_until = now + datetime.timedelta(seconds=settings.lease_seconds)
    with database.atomic():
        delivery = Delivery.get_or_none(Delivery.id == delivery_id)
        if delivery is None:
            raise ClaimRefused(f"no delivery with id {delivery_id}")
        if delivery.status == Delivery.DELIVERED:
            raise ClaimRefused(f"delivery {delivery_id} was already delivered "
                               f"on {delivery.delivered_at:%Y-%m-%d %H:%M:%S} UTC")
        if not delivery.subscription.is_active:
            raise ClaimRefused(
                f"subscription {delivery.subscription.id} is disabled "
                f"({delivery.subscription.disabled_reason or 'no reason recorded'}); "
                f"enable it first with `plantstore webhooks enable "
                f"{delivery.subscription.id}`")
        claimed = (Delivery.update(status=Delivery.PENDING, attempts=0,
                                   next_attempt_at=now, locked_until=leased_until)
                   .where(Delivery.id == delivery_id,
                          Delivery.status != Delivery.DELIVERED, _lease_free(now))
                   .execute())
        if not claimed:
            raise ClaimRefused(f"delivery {delivery_id} is being sent right now; "
                               "try again in a moment")
        return job_of(delivery_id, leased_until, now)


class Worker:
    """Delivers due deliveries until told to stop, with ``worker_threads``
    attempts at once at most."""

    def __init__(self, settings):
        self.settings = settings
        self.stopping = threading.Event()
        self.tally = collections.Counter()
        self._tally_lock = threading.Lock()
        self._next_housekeeping = 0.0
        self.dispatcher = Dispatcher(settings, settings.worker_threads,
                                     settings.sends_per_receiver, on_recorded=self._count,
                                     queue_ahead=True)

    def _count(self, kinds):
        with self._tally_lock:
            self.tally.update(kind or "unrecorded" for kind in kinds)

    def stop(self):
        """Start no more attempts; those under way end by their deadline
        (safe from a signal handler)."""
        self.stopping.set()
        self.dispatcher.stop_starting()

    def _deliver(self, due_by, until_idle):
        """Start attempts at due deliveries as sender threads free up, until
        stopped (or, with ``until_idle``, until nothing is due and nothing is
        under way); returns how many were started."""
        started = 0
        while not self.stopping.is_set():
            free, room = self.dispatcher.room()
            unwritten_at_claim = self.dispatcher.in_flight()
            wanted = min(free, self.settings.batch_size)
            jobs = (claim_due(wanted, self.settings, due_by, room,
                              self.dispatcher.receiver_room) if wanted > 0 else [])
            for job in jobs:
                if not self.dispatcher.try_start(job):  # only if the caps shrank meanwhile
                    self.dispatcher.give_back([job])
            started += len(jobs)
            if jobs and len(jobs) == wanted:
                continue  # claim again at once: there may be more, for other receivers
            self._housekeep()
            if self.dispatcher.in_flight():
                if (self.dispatcher.wait_for_change(WAKE_SECONDS)
                        and self.dispatcher.in_flight()):
                    time.sleep(CLAIM_GATHER_SECONDS)
            elif unwritten_at_claim:
                # The claim skipped receivers with attempts under way or not
                # yet written (at their cap, or an open breaker's probe); those
                # have ended since, so claim again before calling this idle.
                continue
            elif until_idle:
                break
            else:
                self.stopping.wait(self.settings.poll_interval)
        return started

    def _housekeep(self, force=False):
        """Purge what outlived its keep (deliveries past retention, expired
        idempotency keys), at most once per HOUSEKEEPING_SECONDS, in small
        batches and at most HOUSEKEEPING_BATCHES of each, so deliveries never
        wait long for it. The purges never raise."""
        now = time.monotonic()
        if not force and now < self._next_housekeeping:
            return
        self._next_housekeeping = now + HOUSEKEEPING_SECONDS
        for purge in (lambda: lifecycle.purge_expired(self.settings), purge_expired_keys):
            for _ in range(HOUSEKEEPING_BATCHES):
                if not purge():
                    break

    def _finish(self):
        """Wait for attempts under way (they end by their deadline) and their outcomes."""
        try:
            self.dispatcher.finish()
        finally:
            database.close()

    def run_once(self):
        """Deliver what was due when called, then return the tally of outcomes.

        Retries scheduled during the run wait for a later run, so the call
        ends even when a receiver keeps failing with a zero delay.
        """
        try:
            self._housekeep(force=True)
            self._deliver(due_by=utcnow(), until_idle=True)
        finally:
            self._finish()
        return self.tally

    def run_forever(self):
        """Poll for due deliveries until ``stop``; returns the tally."""
        log.info("webhook worker started (poll every %gs, %d attempts at once)",
                 self.settings.poll_interval, self.settings.worker_threads)
        try:
            while not self.stopping.is_set():
                try:
                    self._deliver(due_by=None, until_idle=False)
                except Exception:
                    log.exception("webhook worker: claiming deliveries failed; "
                                  "retrying after the poll interval")
                    database.close()
                    self.stopping.wait(self.settings.poll_interval)
        finally:
            self._finish()
        log.info("webhook worker stopped: %s", dict(self.tally) or "nothing delivered")
        return self.tally
