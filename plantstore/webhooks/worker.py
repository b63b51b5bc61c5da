"""The delivery worker: claim what is due, attempt it, record what happened.

Any number of workers, on any number of machines, may share one database.
A worker claims a batch by leasing it (``locked_until``) in one short
transaction: on PostgreSQL the candidate rows are locked with ``FOR UPDATE
SKIP LOCKED``, so concurrent workers take disjoint batches without waiting;
on SQLite the transaction begins IMMEDIATE, so claims run one at a time.
Rows under a lease (being sent by a create request or another worker) are
never claimed, so no event is sent twice at once.
"""
import collections
import datetime
import logging
import threading

from ..db import database, is_sqlite
from ..models import Delivery, Subscription, utcnow
from . import lifecycle
from .dispatch import DeliveryPool
from .jobs import jobs_for_ids

log = logging.getLogger(__name__)


def _lease_free(now):
    return Delivery.locked_until.is_null() | (Delivery.locked_until <= now)


def claim_due(limit, settings, due_by=None):
    """Lease up to ``limit`` pending deliveries due by ``due_by`` (default now)
    to this worker; returns their jobs, most overdue first."""
    now = utcnow()
    leased_until = now + datetime.timedelta(seconds=settings.lease_seconds)
    active = Subscription.select(Subscription.id).where(
        Subscription.is_active == True)  # noqa: E712
    with database.atomic():
        query = (Delivery.select(Delivery.id)
                 .where(Delivery.status == Delivery.PENDING,
                        Delivery.next_attempt_at <= (due_by or now),
                        _lease_free(now),
                        Delivery.subscription.in_(active))
                 .order_by(Delivery.next_attempt_at, Delivery.id)
                 .limit(limit))
        if not is_sqlite():
            query = query.for_update(skip_locked=True)
        ids = [row[0] for row in query.tuples()]
        if not ids:
            return []
        Delivery.update(locked_until=leased_until).where(Delivery.id.in_(ids)).execute()
        return jobs_for_ids(ids, leased_until, now)


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
        return jobs_for_ids([delivery_id], leased_until, now)[0]


class Worker:
    """Delivers due deliveries in batches until told to stop."""

    def __init__(self, settings):
        self.settings = settings
        self.pool = DeliveryPool(settings.batch_size)
        self.stopping = threading.Event()
        self.tally = collections.Counter()

    def stop(self):
        """Finish the batch under way, then stop (safe from a signal handler)."""
        self.stopping.set()

    def deliver_due(self, due_by=None):
        """Claim and attempt batches until nothing is due by ``due_by`` (or
        until stopped); returns how many attempts were made."""
        made = 0
        while not self.stopping.is_set():
            jobs = claim_due(self.settings.batch_size, self.settings, due_by)
            if not jobs:
                break
            outcomes = self.pool.deliver_all(jobs, self.settings)
            self.tally.update(kind or "unrecorded" for kind in outcomes)
            made += len(jobs)
        return made

    def run_once(self):
        """Deliver what was due when called, then return the tally of outcomes.

        Retries scheduled during the run wait for a later run, so the call
        ends even when a receiver keeps failing with a zero delay.
        """
        try:
            self.deliver_due(due_by=utcnow())
        finally:
            self.pool.shutdown()
            database.close()
        return self.tally

    def run_forever(self):
        """Poll for due deliveries until ``stop``; returns the tally."""
        log.info("webhook worker started (poll every %gs, batches of %d)",
                 self.settings.poll_interval, self.settings.batch_size)
        try:
            while not self.stopping.is_set():
                try:
                    made = self.deliver_due()
                except Exception:
                    log.exception("webhook worker: claiming deliveries failed; "
                                  "retrying after the poll interval")
                    database.close()
                    made = 0
                lifecycle.purge_expired(self.settings)
                if not made:
                    self.stopping.wait(self.settings.poll_interval)
        finally:
            self.pool.shutdown()
            database.close()
        log.info("webhook worker stopped: %s", dict(self.tally) or "nothing delivered")
        return self.tally
