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
from ..db import database, is_sqlite
from ..models import Attempt, Delivery, Subscription, utcnow

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


def record_outcome(job, result, settings):
    """Decide what ``result`` means for ``job``'s delivery and write it down.

    Returns the outcome kind, or None when the lease was lost meanwhile (the
    delivery belongs to another sender now, which writes its own outcome).
    """
    now = utcnow()
    attempts_made = job.attempts + 1
    outcome = decide(attempts_made, result, settings, now)
    changes = {Delivery.attempts: attempts_made, Delivery.locked_until: None,
               Delivery.last_error: None if result.ok else result.summary()}
    if outcome.kind == DELIVERED:
        changes.update({Delivery.status: Delivery.DELIVERED, Delivery.delivered_at: now})
    elif outcome.kind == RETRY:
        changes[Delivery.next_attempt_at] = outcome.next_attempt_at
    else:
        changes[Delivery.status] = Delivery.FAILED
    with database.connection_context(), database.atomic():
        if not is_sqlite():
            # An outcome lost in a crash costs one more send of an event that
            # is still leased and pending, which at-least-once allows, so
            # this commit does not wait for the disk flush.
            database.execute_sql("SET LOCAL synchronous_commit TO OFF")
        still_ours = (Delivery.update(changes)
                      .where(Delivery.id == job.delivery_id,
                             Delivery.locked_until == job.leased_until)
                      .execute())
        if not still_ours:
            log.warning("delivery %s: lease lost before the outcome (%s) was "
                        "written; another sender owns it", job.delivery_id,
                        result.summary() or "delivered")
            return None
        Attempt.insert(delivery=job.delivery_id, started_at=result.started_at,
                       status_code=result.status_code, error=result.error,
                       duration_ms=result.duration_ms).execute()
        if outcome.kind == GONE:
            disable_subscription(job.subscription_id,
                                 f"the receiver answered 410 Gone on {now:%Y-%m-%d %H:%M:%S} UTC")
    metrics.count_delivery(outcome.kind)
    log.log(LOG_LEVELS[outcome.kind], "delivery %s (%s) to subscription %s: %s%s",
            job.delivery_id, job.message_id, job.subscription_id, outcome.kind,
            "" if result.ok else f" ({result.summary()})")
    return outcome.kind


def disable_subscription(subscription_id, reason):
    """Stop sending to a subscription and give up its waiting deliveries."""
    Subscription.update(is_active=False, disabled_reason=reason).where(
        Subscription.id == subscription_id).execute()
    (Delivery.update(status=Delivery.FAILED,
                     last_error=f"subscription disabled: {reason}")
     .where(Delivery.subscription == subscription_id,
            Delivery.status == Delivery.PENDING)
     .execute())
