"""A subscription's life after it is made: disabled (by a 410 or after
sustained failure) and enabled again, its old deliveries purged, failed ones
recovered, a test event queued. The same for API and CLI subscriptions.

- Disabled after sustained failure: when an attempt fails and the
  subscription has had no successful delivery for
  ``PLANTSTORE_WEBHOOK_DISABLE_AFTER_HOURS`` (counted from its last success,
  or from when it was made or enabled again if later).
- Retention: delivered and failed deliveries older than
  ``PLANTSTORE_WEBHOOK_RETENTION_DAYS`` (by creation time) are deleted with
  their attempts, ``PURGE_BATCH`` at a time; pending ones never are.
"""
import datetime
import json
import logging
import time
import uuid

from peewee import fn

from .. import metrics
from ..db import database
from ..models import Attempt, Delivery, Subscription, utcnow

log = logging.getLogger(__name__)

GONE, FAILING = "gone", "failing"
"""Why plantstore disabled a subscription (the metric's ``reason`` label)."""

PURGE_BATCH = 500
"""Deliveries one purge transaction deletes, so it never holds locks for long."""

TEST_EVENT = "plant.test"
TEST_PLANT = {"id": 0, "name": "Example plant (a test event from plantstore)",
              "tag": "test"}
"""The example New Plant body of ``webhooks test`` (a plant that does not exist)."""


def _when(moment):
    return f"{moment:%Y-%m-%d %H:%M:%S} UTC"


def disable(subscription_id, kind, reason, now=None):
    """Stop sending to a subscription, give up its waiting deliveries, log it
    and count it; ``kind`` is GONE or FAILING. Call inside a transaction."""
    now = now or utcnow()
    (Subscription.update(is_active=False, disabled_reason=reason, disabled_at=now)
     .where(Subscription.id == subscription_id).execute())
    (Delivery.update(status=Delivery.FAILED,
                     last_error=f"subscription disabled: {reason}")
     .where(Delivery.subscription == subscription_id,
            Delivery.status == Delivery.PENDING)
     .execute())
    metrics.count_disabled(kind)
    log.warning("webhook subscription %s disabled: %s", subscription_id, reason)


def changes(succeeded, now):
    """The subscription columns a batch of its attempts changes: the time of
    its last success, when one ``succeeded``."""
    return {Subscription.last_success_at: now} if succeeded else {}


def disable_if_failing_too_long(subscription_id, settings, now):
    """After a failed attempt: disable the subscription if it has had no
    success for ``settings.disable_after_hours``; True if it did."""
    hours = settings.disable_after_hours
    cutoff = now - datetime.timedelta(hours=hours)
    reason = (f"no successful delivery for {hours:g} h while deliveries kept "
              f"failing (disabled {_when(now)})")
    healthy_since = fn.COALESCE(Subscription.enabled_at, Subscription.created_at)
    stopped = (Subscription.update(is_active=False, disabled_reason=reason, disabled_at=now)
               .where(Subscription.id == subscription_id,
                      Subscription.is_active == True,  # noqa: E712
                      healthy_since < cutoff,
                      Subscription.last_success_at.is_null()
                      | (Subscription.last_success_at < cutoff))
               .execute())
    if stopped:
        disable(subscription_id, FAILING, reason, now)
    return bool(stopped)


def enable(subscription_id):
    """Send to a disabled subscription again; its clock of failure starts
    anew, and its circuit breaker closes (the operator or user says the
    receiver is back: creates attempt it at once again)."""
    with database.atomic():
        (Subscription.update(is_active=True, disabled_reason=None, disabled_at=None,
                             enabled_at=utcnow(), failure_streak=0,
                             breaker_opened_at=None, breaker_probe_at=None)
         .where(Subscription.id == subscription_id).execute())


def purge_batch(older_than_days):
    """Delete up to ``PURGE_BATCH`` finished deliveries created more than
    ``older_than_days`` ago, with their attempts; returns how many."""
    cutoff = utcnow() - datetime.timedelta(days=older_than_days)
    finished = (Delivery.status.in_([Delivery.DELIVERED, Delivery.FAILED])
                & (Delivery.created_at < cutoff))
    with database.atomic():
        ids = [row[0] for row in Delivery.select(Delivery.id).where(finished)
               .order_by(Delivery.id).limit(PURGE_BATCH).tuples()]
        if not ids:
            return 0
        Attempt.delete().where(Attempt.delivery.in_(ids)).execute()
        return Delivery.delete().where(Delivery.id.in_(ids), finished).execute()


def purge_expired(settings):
    """One retention batch, for the worker's poll loop; never raises."""
    try:
        deleted = purge_batch(settings.retention_days)
    except Exception:
        log.exception("webhook retention: purging old deliveries failed; "
                      "trying again at the next poll")
        database.close()
        return 0
    if deleted:
        log.info("webhook retention: deleted %d deliveries older than %d days",
                 deleted, settings.retention_days)
    return deleted


def purge(older_than_days, deadline_seconds=None):
    """Purge batch after batch until none is left (or ``deadline_seconds``
    passed); returns how many deliveries were deleted."""
    started = time.monotonic()
    total = 0
    while True:
        deleted = purge_batch(older_than_days)
        total += deleted
        if deleted < PURGE_BATCH:
            return total
        if deadline_seconds is not None and time.monotonic() - started > deadline_seconds:
            return total


def recover(subscription_id, since):
    """Queue again every failed delivery of the subscription created at or
    after ``since`` (naive UTC), with its webhook-id; returns how many."""
    with database.atomic():
        return (Delivery.update(status=Delivery.PENDING, attempts=0,
                                next_attempt_at=utcnow(), locked_until=None)
                .where(Delivery.subscription == subscription_id,
                       Delivery.status == Delivery.FAILED,
                       Delivery.created_at >= since)
                .execute())


def queue_test_event(subscription_id):
    """Queue a signed example New Plant event for the subscription, due now;
    returns its delivery (the workers send it like any other)."""
    now = utcnow()
    with database.atomic():
        return Delivery.create(
            subscription=subscription_id, message_id=f"msg_{uuid.uuid4().hex}",
            event_type=TEST_EVENT, payload=json.dumps(TEST_PLANT),
            status=Delivery.PENDING, next_attempt_at=now, created_at=now)
