"""The delivery log: a page of deliveries, newest first, with every attempt,
for the API, the portal and the CLI alike.

A page is keyset-paged on the delivery's id (``before``: only older ones),
filtered by subscription(s), status and a range of creation times. Who may
see which deliveries is the subscriptions' audience (``audience``).
"""
import collections
import dataclasses

from ...db.models import Attempt, Delivery, Subscription
from . import audience


@dataclasses.dataclass(frozen=True)
class Filters:
    """What a page of the log shows: ``subscription_id`` (None: every one
    the caller sees), ``status``, ``created_from`` / ``created_to`` (naive
    UTC, inclusive / exclusive), ``before`` (a delivery id: older ones only)."""
    subscription_id: int = None
    status: str = None
    created_from: object = None
    created_to: object = None
    before: int = None


def page(caller, filters, limit):
    """Up to ``limit`` deliveries ``caller`` (an ``auth.Caller``; None: the
    operator, every one) may see, newest first, with their attempts; and
    whether older ones follow."""
    query = Delivery.select().order_by(Delivery.id.desc()).limit(limit + 1)
    if filters.subscription_id is not None:
        query = query.where(Delivery.subscription == filters.subscription_id)
    if caller is not None and not caller.is_admin:
        visible = audience.visible_to(caller).select(Subscription.id)
        query = query.where(Delivery.subscription.in_(visible))
    if filters.status:
        query = query.where(Delivery.status == filters.status)
    if filters.created_from is not None:
        query = query.where(Delivery.created_at >= filters.created_from)
    if filters.created_to is not None:
        query = query.where(Delivery.created_at < filters.created_to)
    if filters.before is not None:
        query = query.where(Delivery.id < filters.before)
    deliveries = list(query)
    more = len(deliveries) > limit
    return with_attempts(deliveries[:limit]), more


def with_attempts(deliveries):
    """``deliveries``, each given ``attempt_rows`` (oldest first) and
    ``next_attempt`` (when a pending one is tried next; None otherwise)."""
    attempts = collections.defaultdict(list)
    if deliveries:
        for attempt in (Attempt.select()
                        .where(Attempt.delivery.in_([d.id for d in deliveries]))
                        .order_by(Attempt.started_at, Attempt.id)):
            attempts[attempt.delivery_id].append(attempt)
    for delivery in deliveries:
        delivery.attempt_rows = attempts[delivery.id]
        delivery.next_attempt = (delivery.next_attempt_at
                                 if delivery.status == Delivery.PENDING else None)
    return deliveries


def delivery_with_attempts(caller, delivery_id, subscription_id=None):
    """The delivery ``caller`` (None: the operator) may see with this id (of
    that subscription, when given), with its attempts; or None."""
    query = Delivery.select().where(Delivery.id == delivery_id)
    if subscription_id is not None:
        query = query.where(Delivery.subscription == subscription_id)
    if caller is not None and not caller.is_admin:
        query = query.where(Delivery.subscription.in_(
            audience.visible_to(caller).select(Subscription.id)))
    delivery = query.first()
    return with_attempts([delivery])[0] if delivery else None


def last_attempts(subscription_ids):
    """{subscription id: its latest attempt} for those that had one, read in
    one statement whatever their number: for each subscription, a subquery
    walks its deliveries newest first (the ``(subscription_id, id)`` index)
    to the first that was tried."""
    if not subscription_ids:
        return {}
    latest_attempt = (Attempt.select(Attempt.id).join(Delivery)
                      .where(Delivery.subscription == Subscription.id)
                      .order_by(Delivery.id.desc(), Attempt.id.desc()).limit(1))
    latest = (Subscription.select(Subscription.id.alias("subscription_id"),
                                  latest_attempt.alias("attempt_id"))
              .where(Subscription.id.in_(list(subscription_ids))).alias("latest"))
    attempts = (Attempt.select(Attempt.started_at, Attempt.status_code, Attempt.error,
                               latest.c.subscription_id)
                .join(latest, on=(Attempt.id == latest.c.attempt_id)).objects())
    return {attempt.subscription_id: attempt for attempt in attempts}
