"""The delivery queue's hot SQL, compiled once (see ``db.Statement``).

A draining worker runs these for every claim and every batch of outcomes,
and it is CPU-bound: building and compiling them with peewee cost more than
running them (on PostgreSQL, a claim of 13 took 2.3 ms of CPU, its SELECT
0.1 ms of that on the database side; a batch of 13 outcomes the same).
Statements whose SQL depends on how many ids they carry are compiled once
per count.

- ``due``: pending deliveries due by a time and free of leases, with their
  subscriptions' columns (``jobs.JOB_COLUMNS``), most overdue first; locked
  with ``FOR UPDATE SKIP LOCKED`` on PostgreSQL.
- ``lease``: lease deliveries until a time.
- ``mark_delivered``: deliveries still under a lease marked delivered.
- ``log_attempts``: attempt-log rows.
"""
import datetime
import functools

from ..db import Statement, is_sqlite
from ..models import Attempt, Delivery, Subscription
from .jobs import JOB_COLUMNS

_A_TIME = datetime.datetime(2000, 1, 1)
_ANOTHER_TIME = datetime.datetime(2000, 1, 2)
_COMPILED_COUNTS = 512
"""Most compiled variants kept per statement (one per id count)."""


def _ids(count):
    """Example ids for a statement compiled for ``count`` of them."""
    return [-index for index in range(1, count + 1)]


@functools.lru_cache(maxsize=_COMPILED_COUNTS)
def _due(skipped):
    def build(status, due_by, lease_free_at, active, probe_by, *rest):
        *skipped_ids, limit = rest
        query = (Delivery.select(*JOB_COLUMNS).join(Subscription)
                 .where(Delivery.status == status,
                        Delivery.next_attempt_at <= due_by,
                        Delivery.locked_until.is_null()
                        | (Delivery.locked_until <= lease_free_at),
                        Subscription.is_active == active,
                        Subscription.breaker_probe_at.is_null()
                        | (Subscription.breaker_probe_at <= probe_by)))
        if skipped_ids:
            query = query.where(Delivery.subscription.not_in(skipped_ids))
        query = query.order_by(Delivery.next_attempt_at, Delivery.id).limit(limit)
        if not is_sqlite():
            query = query.for_update(of=Delivery, skip_locked=True)
        return query
    return Statement(build, "status", _A_TIME, _ANOTHER_TIME, True,
                     datetime.datetime(2000, 1, 3), *_ids(skipped), 1)


def due(limit, due_by, now, skipped_subscriptions=()):
    """Rows of ``JOB_COLUMNS`` for up to ``limit`` pending deliveries due by
    ``due_by``, unleased at ``now``, of active subscriptions (those in
    ``skipped_subscriptions`` left out) whose breaker is closed or due a probe."""
    skipped = list(skipped_subscriptions)
    return _due(len(skipped)).rows(Delivery.PENDING, due_by, now, True, now, *skipped, limit)


@functools.lru_cache(maxsize=_COMPILED_COUNTS)
def _lease(count):
    return Statement(
        lambda until, *ids: Delivery.update(locked_until=until).where(Delivery.id.in_(ids)),
        _A_TIME, *_ids(count))


def lease(delivery_ids, until):
    """Lease these deliveries until ``until`` (the caller holds their rows)."""
    _lease(len(delivery_ids)).execute(until, *delivery_ids)


@functools.lru_cache(maxsize=_COMPILED_COUNTS)
def _mark_delivered(count):
    def build(status, one, unlocked, error, delivered_at, lease_held, *ids):  # model order
        return (Delivery.update({Delivery.status: status,
                                 Delivery.attempts: Delivery.attempts + one,
                                 Delivery.last_error: error,
                                 Delivery.delivered_at: delivered_at,
                                 Delivery.locked_until: unlocked})
                .where(Delivery.locked_until == lease_held, Delivery.id.in_(ids))
                .returning(Delivery.id))
    return Statement(build, "status", 1, _A_TIME, "error", _ANOTHER_TIME,
                     datetime.datetime(2000, 1, 3), *_ids(count))


def mark_delivered(delivery_ids, lease_held, now):
    """Mark delivered those of these deliveries still leased until
    ``lease_held``; the ids it marked."""
    rows = _mark_delivered(len(delivery_ids)).rows(
        Delivery.DELIVERED, 1, None, None, now, lease_held, *delivery_ids)
    return {delivery_id for delivery_id, in rows}


_ATTEMPT_FIELDS = (Attempt.delivery, Attempt.started_at, Attempt.status_code,
                   Attempt.error, Attempt.duration_ms)


@functools.lru_cache(maxsize=_COMPILED_COUNTS)
def _log_attempts(count):
    width = len(_ATTEMPT_FIELDS)

    def build(*values):
        rows = [values[start:start + width] for start in range(0, len(values), width)]
        return Attempt.insert_many(rows, fields=_ATTEMPT_FIELDS).as_rowcount()
    example = [value for index in range(count)
               for value in (-index - 1, _A_TIME, 200 + index, f"error {index}", index)]
    return Statement(build, *example)


def log_attempts(rows):
    """Insert attempt-log rows: (delivery id, started at, status code or None,
    error or None, duration in ms) tuples."""
    _log_attempts(len(rows)).execute(*(value for row in rows for value in row))

