"""What an attempt means for its delivery, decided and written in one place.

``record_outcome`` is the single point where every attempt, from a create
request or a worker, becomes one of the outcomes below; the attempt is
logged and the delivery moved on in one transaction, fenced by the lease
the sender held.
"""
import dataclasses
import datetime
import logging
import random

from .. import metrics
from peewee import SQL

from ..db import Statement, database, is_sqlite
from ..models import Attempt, Delivery, utcnow
from . import lifecycle

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


# Every attempt writes one of these: compiled once (see db.Statement). Each
# UPDATE ends with the lease fence, WHERE id = ? AND locked_until = ?; the
# example values follow the SQL's column order (the model's field order).
_T1, _T2 = datetime.datetime(2000, 1, 1), datetime.datetime(2000, 1, 2)
NULL = SQL("NULL")


def _fenced_update(changes, *example):
    """A compiled UPDATE of one delivery, writing ``changes(*values)`` and
    releasing the lease, but only while the sender's lease holds (the
    delivery id and that lease are its two last values)."""
    return Statement(
        lambda *values: Delivery.update({**changes(*values[:-2]), Delivery.locked_until: NULL})
        .where(Delivery.id == values[-2], Delivery.locked_until == values[-1]),
        *example, -1, _T2)


_MARK_DELIVERED = _fenced_update(
    lambda status, attempts, delivered_at: {
        Delivery.status: status, Delivery.attempts: attempts, Delivery.last_error: NULL,
        Delivery.delivered_at: delivered_at},
    "status", -2, _T1)
_MARK_RETRY = _fenced_update(
    lambda attempts, next_attempt_at, last_error: {
        Delivery.attempts: attempts, Delivery.next_attempt_at: next_attempt_at,
        Delivery.last_error: last_error},
    -2, _T1, "error")
_MARK_FAILED = _fenced_update(
    lambda status, attempts, last_error: {
        Delivery.status: status, Delivery.attempts: attempts,
        Delivery.last_error: last_error},
    "status", -2, "error")
_LOG_ATTEMPT = Statement(
    lambda delivery, started_at, status_code, error, duration_ms: Attempt.insert(
        delivery=delivery, started_at=started_at, status_code=status_code, error=error,
        duration_ms=duration_ms),
    -1, _T1, -2, "error", -3)


def _write(job, outcome, result, now):
    """The fenced UPDATE moving the delivery on; True if the lease still held."""
    attempts = job.attempts + 1
    if outcome.kind == DELIVERED:
        cursor = _MARK_DELIVERED.execute(Delivery.DELIVERED, attempts, now,
                                         job.delivery_id, job.leased_until)
    elif outcome.kind == RETRY:
        cursor = _MARK_RETRY.execute(attempts, outcome.next_attempt_at, result.summary(),
                                     job.delivery_id, job.leased_until)
    else:
        cursor = _MARK_FAILED.execute(Delivery.FAILED, attempts, result.summary(),
                                      job.delivery_id, job.leased_until)
    return cursor.rowcount == 1


def record_outcome(job, result, settings):
    """Decide what ``result`` means for ``job``'s delivery and write it down.

    Returns the outcome kind, or None when the lease was lost meanwhile (the
    delivery belongs to another sender now, which writes its own outcome).
    """
    now = utcnow()
    outcome = decide(job.attempts + 1, result, settings, now)
    with database.connection_context(), database.atomic():
        if not is_sqlite():
            # An outcome lost in a crash costs one more send of an event that
            # is still leased and pending, which at-least-once allows, so
            # this commit does not wait for the disk flush.
            database.execute_sql("SET LOCAL synchronous_commit TO OFF")
        if not _write(job, outcome, result, now):
            log.warning("delivery %s: lease lost before the outcome (%s) was "
                        "written; another sender owns it", job.delivery_id,
                        result.summary() or "delivered")
            return None
        _LOG_ATTEMPT.execute(job.delivery_id, result.started_at, result.status_code,
                             result.error, result.duration_ms)
        if outcome.kind == GONE:
            disable_subscription(job.subscription_id,
                                 f"the receiver answered 410 Gone on {now:%Y-%m-%d %H:%M:%S} UTC")
        elif outcome.kind == DELIVERED:
            lifecycle.note_success(job.subscription_id, now)
        else:
            lifecycle.disable_if_failing_too_long(job.subscription_id, settings, now)
    metrics.count_delivery(outcome.kind)
    log.log(LOG_LEVELS[outcome.kind], "delivery %s (%s) to subscription %s: %s%s",
            job.delivery_id, job.message_id, job.subscription_id, outcome.kind,
            "" if result.ok else f" ({result.summary()})")
    return outcome.kind


def disable_subscription(subscription_id, reason):
    """Stop sending to a subscription and give up its waiting deliveries."""
    lifecycle.disable(subscription_id, lifecycle.GONE, reason)
