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

What a bucket holds and gives is ``rules``' (``bucket_level``,
``tokens_taken``, ``tokens_given_back``, ``claim_tokens_wanted``); the
delivery store keeps the buckets (``store.DeliveryStore``'s ``throttle_*``).
"""
import collections

from ...db import clock, database
from ...observability import metrics
from . import backlog, store


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
    return store.current().throttle_take_for_claim(room.subscriptions, room.subscription_default,
                                                   limit, due_by)


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
"""The ``lease`` of a job a create stored unleased because its receiver is
throttled and had no token (a store that ``TAKES_TOKEN_AT_INSERT``)."""


def admits_stored(job, give_back):
    """Whether ``job``, leased to a web process by a create, may be attempted
    now: its receiver is not throttled, or a token was taken for it (by the
    create's statement where the store ``TAKES_TOKEN_AT_INSERT``, else here).
    If not, it is handed to ``give_back(job)`` (to the workers, unsent)."""
    if not store.current().TAKES_TOKEN_AT_INSERT:
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
    return store.current().throttle_take(wants)


def give_back_tokens(unused):
    """Put back tokens taken but not spent: {subscription id: count}."""
    unused = {subscription_id: n for subscription_id, n in unused.items() if n > 0}
    if unused:
        store.current().throttle_give_back(unused)
