"""What attempts mean for their deliveries, decided and written in one place.

``record_outcomes`` is the single point where attempts, from a web process
or a worker, become one of the outcomes below. A batch of them is written in
one transaction: each delivery moved on, each attempt logged, each
receiver's circuit breaker updated. Every write is fenced by the lease the
sender held (``WHERE id = ? AND locked_until = <its lease>``): a sender whose
lease ran out writes nothing over the work of the one that took over.
"""
import collections
import dataclasses
import datetime
import logging
import random

from .. import metrics
from ..db import database, is_sqlite
from ..models import Delivery, Subscription, utcnow
from . import breaker, lifecycle, queue_queries

log = logging.getLogger(__name__)

DELIVERED = "delivered"  # a 2xx: done
RETRY = "retry"          # a failure with retries left: scheduled again
FAILED = "failed"        # a failure after the last retry: given up
GONE = "gone"            # a 410: the subscription is disabled, its queue failed

LOG_LEVELS = {DELIVERED: logging.DEBUG, RETRY: logging.INFO,
              FAILED: logging.WARNING, GONE: logging.WARNING}

JITTER = 0.1
"""Each scheduled delay is spread by up to this fraction either way, so a
receiver coming back is not hit by every retry in the same second."""


@dataclasses.dataclass(frozen=True)
class Outcome:
    """The decision about one attempt: its kind, and when to try next."""
    kind: str
    next_attempt_at: datetime.datetime | None = None


def retry_delay(attempts_made, result, settings):
    """Seconds until the next try after ``attempts_made`` attempts, or None.

    The schedule gives the delay (with jitter); a Retry-After from a 429 or
    503 makes it at least that long, but never longer than the schedule's
    largest step.
    """
    if attempts_made > len(settings.retry_schedule):
        return None
    delay = settings.retry_schedule[attempts_made - 1]
    delay *= random.uniform(1 - JITTER, 1 + JITTER)
    if result.retry_after is not None:
        delay = max(delay, min(result.retry_after, settings.longest_delay))
    return delay


def decide(attempts_made, result, settings, now):
    """The outcome of an attempt, the ``attempts_made``-th of its delivery."""
    if result.ok:
        return Outcome(DELIVERED)
    if result.status_code == 410:
        return Outcome(GONE)
    delay = retry_delay(attempts_made, result, settings)
    if delay is None:
        return Outcome(FAILED)
    return Outcome(RETRY, now + datetime.timedelta(seconds=delay))


def _fence(job):
    return (Delivery.id == job.delivery_id) & (Delivery.locked_until == job.leased_until)


def _mark_delivered(jobs, now):
    """Mark delivered those of ``jobs`` whose lease holds; their delivery ids.

    Jobs claimed together share one lease, so this is one UPDATE per claim.
    """
    by_lease = collections.defaultdict(list)
    for job in jobs:
        by_lease[job.leased_until].append(job.delivery_id)
    held = set()
    for lease, ids in by_lease.items():
        held |= queue_queries.mark_delivered(ids, lease, now)
    return held


def _mark_undelivered(job, outcome, result):
    """Write a failed attempt's outcome; True if the lease held."""
    changes = {Delivery.attempts: job.attempts + 1, Delivery.last_error: result.summary(),
               Delivery.locked_until: None}
    if outcome.kind == RETRY:
        changes[Delivery.next_attempt_at] = outcome.next_attempt_at
    else:
        changes[Delivery.status] = Delivery.FAILED
    return Delivery.update(changes).where(_fence(job)).execute() == 1


def _write(attempts, settings, now):
    """Write ``[(job, result, outcome)]`` down; the kinds written (None: lease lost)."""
    delivered = _mark_delivered([job for job, _, outcome in attempts
                                 if outcome.kind == DELIVERED], now)
    kinds, logged, by_receiver = [], [], collections.defaultdict(list)
    for job, result, outcome in attempts:
        if outcome.kind == DELIVERED:
            held = job.delivery_id in delivered
        else:
            held = _mark_undelivered(job, outcome, result)
        kinds.append(outcome.kind if held else None)
        if not held:
            continue
        logged.append((job.delivery_id, result.started_at, result.status_code,
                       result.error, result.duration_ms))
        by_receiver[job.subscription_id].append(result)
    if logged:
        queue_queries.log_attempts(logged)
    for subscription_id, results in by_receiver.items():
        succeeded = any(result.ok for result in results)
        changes = {**breaker.changes(results, settings, now), **lifecycle.changes(succeeded, now)}
        if changes:
            Subscription.update(changes).where(Subscription.id == subscription_id).execute()
        if not succeeded:
            lifecycle.disable_if_failing_too_long(subscription_id, settings, now)
    for (job, _, _), kind in zip(attempts, kinds):
        if kind == GONE:
            disable_subscription(job.subscription_id, "the receiver answered 410 Gone "
                                 f"on {now:%Y-%m-%d %H:%M:%S} UTC")
    return kinds


def record_outcomes(attempts, settings):
    """Decide what each ``(job, result)`` means and write them all in one
    transaction; returns the outcome kinds, in order (None where the lease
    was lost meanwhile: the delivery belongs to another sender now)."""
    now = utcnow()
    decided = [(job, result, decide(job.attempts + 1, result, settings, now))
               for job, result in attempts]
    with database.connection_context(), database.atomic():
        # An outcome lost in a crash costs one more send of an event that is
        # still leased and pending, which at-least-once allows.
        commit_without_flush()
        kinds = _write(decided, settings, now)
    for (job, result, _), kind in zip(decided, kinds):
        if kind is None:
            log.warning("delivery %s: lease lost before the outcome (%s) was written; "
                        "another sender owns it", job.delivery_id,
                        result.summary() or "delivered")
            continue
        metrics.count_delivery(kind)
        log.log(LOG_LEVELS[kind], "delivery %s (%s) to subscription %s: %s%s",
                job.delivery_id, job.message_id, job.subscription_id, kind,
                "" if result.ok else f" ({result.summary()})")
    return kinds


def commit_without_flush():
    """Let the current PostgreSQL transaction commit without waiting for the
    disk flush; for writes whose loss in a crash only causes a resend."""
    if not is_sqlite():
        database.execute_sql("SET LOCAL synchronous_commit TO OFF")


def release(jobs):
    """Give leased jobs back to the workers at once (they were not attempted)."""
    with database.connection_context(), database.atomic():
        commit_without_flush()
        for job in jobs:
            Delivery.update(locked_until=None).where(_fence(job)).execute()


def disable_subscription(subscription_id, reason):
    """Stop sending to a subscription and give up its waiting deliveries."""
    lifecycle.disable(subscription_id, lifecycle.GONE, reason)
