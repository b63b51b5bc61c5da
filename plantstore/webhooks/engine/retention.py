"""The queue's housekeeping (``queue``'s door, in a module of its own): finished
deliveries purged after their retention, in small batches, and the deliveries
a create stored for a subscription while it was being disabled failed."""
import time

from . import store

PURGE_BATCH = 500
"""Deliveries one purge transaction deletes, so it never holds locks for long."""

STRAY_BATCH = 100
"""Most disabled subscriptions one ``fail_stray_deliveries`` call looks at."""


def fail_stray_deliveries():
    """Fail the deliveries a create stored for a subscription while it was
    being disabled, after its waiting ones were failed (PostgreSQL: a
    create's statement never waits for a subscription's row), as disabling
    fails them; how many."""
    return store.current().fail_stray_deliveries(STRAY_BATCH)


def purge_batch(older_than_days):
    """Delete up to ``PURGE_BATCH`` finished deliveries created more than
    ``older_than_days`` ago, with their attempts; returns how many."""
    return store.current().purge_batch(older_than_days, PURGE_BATCH)


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
