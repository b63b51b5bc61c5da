"""The delivery log: a page of deliveries, newest first, with every attempt,
for the API, the portal and the CLI alike.

A page is keyset-paged on the delivery's id (``before``: only older ones),
filtered by subscription(s), status and a range of creation times. Who may
see which deliveries is the subscriptions' audience (``audience``).
"""
import collections
import dataclasses

from ...db import database
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


# Subscriptions read per statement: SQLite allows 500 SELECTs in one compound.
BRANCHES_PER_STATEMENT = 100


def page(caller, filters, limit):
    """Up to ``limit`` deliveries ``caller`` (an ``auth.Caller``; None: the
    operator, every one) may see, newest first, with their attempts; and
    whether older ones follow.

    A user's page reads each of their subscriptions' newest matching
    deliveries through its own index, at most ``limit + 1`` of each, and
    keeps the newest: never another user's rows, however the ids of
    everybody's deliveries interleave (migration 0017, docs/performance.md).
    """
    subscriptions = _subscriptions_read(caller, filters.subscription_id)
    if subscriptions is None:
        deliveries = list(_matching(filters).order_by(Delivery.id.desc()).limit(limit + 1))
        subscriptions = _subscriptions_of(deliveries[:limit])
    else:
        deliveries = _newest_of_each(list(subscriptions), filters, limit + 1)
    more = len(deliveries) > limit
    deliveries = deliveries[:limit]
    for delivery in deliveries:  # a page that shows each one's URL reads no row more
        delivery.subscription = subscriptions[delivery.subscription_id]
    return with_attempts(deliveries), more


def _subscriptions_read(caller, subscription_id):
    """{id: subscription} of those a page reads, or None for every one (the
    operator's or an admin's page without an endpoint chosen)."""
    everything = caller is None or caller.is_admin
    if subscription_id is None and everything:
        return None
    query = Subscription.select() if everything else audience.visible_to(caller)
    if subscription_id is not None:
        query = query.where(Subscription.id == subscription_id)
    return {subscription.id: subscription for subscription in query}


def _subscriptions_of(deliveries):
    """{id: subscription} of the deliveries', read in one statement."""
    ids = {delivery.subscription_id for delivery in deliveries}
    return {s.id: s for s in Subscription.select().where(Subscription.id.in_(ids))}


def _matching(filters, subscription_id=None):
    """The deliveries that pass ``filters`` (of that subscription, when given:
    its condition comes first, its id the statement's first parameter)."""
    query = Delivery.select()
    if subscription_id is not None:
        query = query.where(Delivery.subscription == subscription_id)
    if filters.status:
        query = query.where(Delivery.status == filters.status)
    if filters.created_from is not None:
        query = query.where(Delivery.created_at >= filters.created_from)
    if filters.created_to is not None:
        query = query.where(Delivery.created_at < filters.created_to)
    if filters.before is not None:
        query = query.where(Delivery.id < filters.before)
    return query


def _newest_of_each(subscription_ids, filters, count):
    """The ``count`` newest deliveries passing ``filters`` among those of the
    subscriptions: each subscription's own newest ``count``, read through the
    ``(subscription_id, id)`` or ``(subscription_id, status, id)`` index in a
    branch of a ``UNION ALL``, then the newest of them all.

    The branches differ in their first parameter alone: one is built by
    peewee, and its text repeated (building each costs more than the read).
    """
    if not subscription_ids:
        return []
    branch, params = (_matching(filters, subscription_ids[0])
                      .order_by(Delivery.id.desc()).limit(count).sql())
    mark = database.param
    found = []
    for start in range(0, len(subscription_ids), BRANCHES_PER_STATEMENT):
        chunk = subscription_ids[start:start + BRANCHES_PER_STATEMENT]
        union = " UNION ALL ".join(f"SELECT * FROM ({branch}) AS branch_{number}"
                                   for number in range(len(chunk)))
        every_param = [value for subscription_id in chunk
                       for value in (subscription_id, *params[1:])]
        found.extend(Delivery.raw(f"{union} ORDER BY id DESC LIMIT {mark}",
                                  *every_param, count))
    return sorted(found, key=lambda delivery: delivery.id, reverse=True)[:count]


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
