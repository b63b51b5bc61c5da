"""A throttle per receiver: at most ``rate_limit`` deliveries a second,
across every process on every host.

Each throttled subscription keeps a token bucket on its row: up to
``rate_limit`` tokens, refilled at ``rate_limit`` a second by the database's
clock (``now()`` on PostgreSQL; on SQLite, one host, ``clock.now()``), taken
by one atomic statement. Every attempt at a throttled receiver (a first
attempt or a retry, by a worker or a web process) spends a token taken
before it starts, so over any T seconds a receiver is sent at most
``rate_limit × T + rate_limit`` deliveries (the bucket's content at the
start, and what refills during them).

- A worker, before each claim, takes for each throttled subscription with
  due deliveries at most what the claim could give it (``take_for_claim``)
  and passes them to the claim as that subscription's room: a receiver
  without tokens gets nothing from the claim, and the claim's room goes to
  other receivers. After the claim it gives back the tokens not used
  (``settle``); a probe of an open breaker claimed beyond them is given back
  to the queue unsent.
- A web process sends a create's delivery to a throttled receiver only if a
  token was taken for it (``admits_stored``: on PostgreSQL by the create's
  own statement, through migration 0011's trigger, so a create costs no
  round trip more); otherwise the delivery goes to the workers unsent.

A limit set or changed starts with an empty bucket (``limited``). A
delivery held back uses no attempt, no retry and no sending slot: it just
stays due. A token taken but not spent (an attempt that could not start) is
lost, which only ever sends less.
"""
import collections

from peewee import fn

from .. import clock, metrics
from ..db import database, is_sqlite
from ..models import Delivery, Subscription
from . import backlog

TAKE_FOR_CLAIM = """
SELECT * FROM plantstore_throttle_take_for_claim(
    %(ids)s::int[], %(rooms)s::int[], %(default_room)s, %(limit)s, %(due_by)s::timestamp)
"""
"""Rows (subscription id, tokens taken) of every throttled receiver with due
deliveries (a function of migration 0011, so its plan is kept)."""

TAKE = "SELECT * FROM plantstore_throttle_take(%(ids)s::int[], %(wants)s::int[])"
"""Rows (subscription id, tokens taken) of those of ``ids`` that are throttled."""

GIVE_BACK = "SELECT plantstore_throttle_give_back(%(ids)s::int[], %(counts)s::int[])"
"""Tokens taken but not spent, back into their buckets."""


def limited(rate_limit):
    """The columns of a subscription given ``rate_limit`` (None: no limit): a
    limit set or changed starts with an empty bucket, so the first deliveries
    after it go out at its pace rather than in a burst."""
    return {"rate_limit": rate_limit, "throttle_tokens": 0 if rate_limit else None,
            "throttle_refilled_at": clock.now() if rate_limit else None}


def take_for_claim(room, limit, due_by=None):
    """Tokens for the claim a worker is about to make with ``room`` (a
    ``slots.Room``) and ``limit``: {subscription id: tokens taken} for every
    throttled receiver with due deliveries, each at most what the claim could
    give it (0: none available). Pass them as the claim's rooms."""
    if not is_sqlite():
        rows = database.execute_sql(TAKE_FOR_CLAIM, {
            "ids": list(room.receivers), "rooms": list(room.receivers.values()),
            "default_room": room.receiver_default, "limit": limit,
            "due_by": due_by}).fetchall()
        return dict(rows)
    due = _sqlite_due_throttled(due_by)
    if not due:
        return {}
    wants = {subscription_id: 1 if breaker_open else
             min(room.receivers.get(subscription_id, room.receiver_default), limit)
             for subscription_id, breaker_open in due}
    return _sqlite_take(wants)


def settle(caps, jobs, give_back):
    """After a claim made with ``caps`` (from ``take_for_claim``): give back
    the tokens it did not use, and the jobs it gave beyond a cap (an open
    breaker's probe) through ``give_back(job)``; the jobs to attempt."""
    if not caps:
        return jobs
    claimed = collections.Counter()
    kept = []
    for job in jobs:
        if job.subscription_id in caps and claimed[job.subscription_id] >= caps[
                job.subscription_id]:
            give_back(job)
            continue
        claimed[job.subscription_id] += 1
        kept.append(job)
    give_back_tokens({subscription_id: tokens - claimed[subscription_id]
                      for subscription_id, tokens in caps.items()})
    return kept


LEFT_TO_WORKERS = 0
"""The ``lease`` of a job a create stored unleased on PostgreSQL: its
receiver is throttled and had no token (migration 0011's trigger)."""


def admits_stored(job, give_back):
    """Whether ``job``, leased to a web process by a create, may be attempted
    now: its receiver is not throttled, or a token was taken for it (on
    PostgreSQL in the create's statement, by migration 0011's trigger; on
    SQLite here). If not, it is handed to ``give_back(job)`` (to the
    workers, unsent)."""
    if is_sqlite():
        return admits(job, give_back)
    if job.lease != LEFT_TO_WORKERS:
        return True
    _left_to_workers(job, give_back)
    return False


def admits(job, give_back):
    """Whether ``job`` may be attempted now: its receiver is not throttled,
    or a token is taken for it here. If not, it is handed to
    ``give_back(job)`` (to the workers, unsent)."""
    with database.connection_context():  # a sender thread's: back to the pool after
        if take({job.subscription_id: 1}).get(job.subscription_id, 1):
            return True
    _left_to_workers(job, give_back)
    return False


def _left_to_workers(job, give_back):
    metrics.count_left_to_worker("throttled")
    give_back(job)
    backlog.note_left_to_workers()


def take(wants):
    """Take tokens: {subscription id: tokens wanted} → {id: tokens taken} for
    those that are throttled (the others are absent: no limit)."""
    if not is_sqlite():
        rows = database.execute_sql(TAKE, {"ids": list(wants),
                                           "wants": list(wants.values())}).fetchall()
        return dict(rows)
    throttled = [subscription_id for subscription_id, in Subscription.select(Subscription.id)
                 .where(Subscription.id.in_(list(wants)),
                        Subscription.rate_limit.is_null(False)).tuples()]
    if not throttled:
        return {}
    return _sqlite_take({subscription_id: wants[subscription_id]
                         for subscription_id in throttled})


def give_back_tokens(unused):
    """Put back tokens taken but not spent: {subscription id: count}."""
    unused = {subscription_id: n for subscription_id, n in unused.items() if n > 0}
    if not unused:
        return
    if not is_sqlite():
        database.execute_sql(GIVE_BACK, {"ids": list(unused), "counts": list(unused.values())})
        return
    with database.atomic():
        for subscription_id, count in unused.items():
            (Subscription.update(throttle_tokens=fn.MIN(
                Subscription.rate_limit,
                fn.COALESCE(Subscription.throttle_tokens, Subscription.rate_limit) + count))
             .where(Subscription.id == subscription_id, Subscription.rate_limit.is_null(False))
             .execute())


def _sqlite_due_throttled(due_by):
    """(id, breaker open) of the throttled receivers with due, unleased
    deliveries that the claim may take (an open breaker's once its probe is due)."""
    now = clock.now()
    due = (Delivery.select(Delivery.id)
           .where(Delivery.subscription == Subscription.id,
                  Delivery.status == Delivery.PENDING,
                  Delivery.next_attempt_at <= (due_by or now),
                  Delivery.locked_until.is_null() | (Delivery.locked_until <= now)))
    return list(Subscription.select(Subscription.id,
                                    Subscription.breaker_opened_at.is_null(False))
                .where(Subscription.rate_limit.is_null(False),
                       Subscription.is_active == True,  # noqa: E712
                       Subscription.breaker_opened_at.is_null()
                       | (Subscription.breaker_probe_at <= now),
                       fn.EXISTS(due)).tuples())


def _sqlite_take(wants):
    """``take`` on SQLite (one host: the process's clock is the host's)."""
    taken = {}
    with database.atomic():
        now = clock.now()
        for subscription_id, rate, tokens, refilled in (
                Subscription.select(Subscription.id, Subscription.rate_limit,
                                    Subscription.throttle_tokens,
                                    Subscription.throttle_refilled_at)
                .where(Subscription.id.in_(list(wants)),
                       Subscription.rate_limit.is_null(False)).tuples()):
            elapsed = max(0.0, (now - (refilled or now)).total_seconds())
            level = min(float(rate), (rate if tokens is None else tokens) + rate * elapsed)
            taken[subscription_id] = n = min(int(level), wants[subscription_id])
            if n:
                (Subscription.update(throttle_tokens=level - n,
                                     throttle_refilled_at=max(refilled or now, now))
                 .where(Subscription.id == subscription_id).execute())
    return taken

