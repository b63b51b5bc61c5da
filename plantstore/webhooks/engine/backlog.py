"""The deliveries waiting for a worker: how long the oldest due one has
waited, and a warning when no worker seems to be claiming them.

A delivery is **due** when it is pending, its subscription active, its
``next_attempt_at`` has come and no sender holds it (``locked_until`` unset or past), all by the
database's clock; its age is how long ago it became due. Workers claim due
deliveries within a poll interval, so an old one means no worker is
running, or none keeps up. ``/metrics`` shows the age
(``plantstore_outbox_oldest_due_age_seconds``, ``gauges.py``),
``plantstore deliveries summary`` prints it, and a web process that leaves
deliveries to the workers warns in its log when it passes
``PLANTSTORE_WEBHOOK_BACKLOG_WARN_SECONDS`` (``note_left_to_workers``).
"""
import logging
import threading
import time

from ...db import DATABASE_FAILURES, database
from ...db.models import Delivery, Subscription
from . import store

log = logging.getLogger(__name__)

CHECK_PERIOD_SECONDS = 60.0
"""How often at most a process reads the backlog's age for its warning."""


def sendable():
    """The pending deliveries a worker could send: those of active
    subscriptions (what is left of a disabled one waits for nobody)."""
    return (Delivery.select().join(Subscription)
            .where(Delivery.status == Delivery.PENDING, Subscription.is_active == True))  # noqa: E712


def oldest_due_age():
    """Seconds the oldest due delivery a worker could claim now has waited,
    by the database's clock; 0.0 when none is due. A subscription whose
    breaker is open counts only once its probe is due (its other deliveries
    wait for the breaker, not for a worker). The due rule is the store's."""
    return max(store.current().oldest_due_age(), 0.0)


class BacklogWatch:
    """Warns when deliveries left to the workers wait longer than
    ``threshold`` seconds, reading their age at most once per ``period``.

    ``note`` is on the hot path of every delivery left to the workers: it
    compares two numbers, and once per period (the first call after it
    ends) reads the age in the caller's thread, with the caller's
    connection or one opened and closed for it. ``monotonic`` is the clock
    of the period (``time.monotonic``).
    """

    def __init__(self, threshold, period=CHECK_PERIOD_SECONDS, monotonic=time.monotonic):
        self.threshold = threshold
        self.period = period
        self.monotonic = monotonic
        self.next_check = float("-inf")  # the first note checks
        self.lock = threading.Lock()

    def note(self):
        """One delivery was left to the workers: check the backlog if a period has passed."""
        now = self.monotonic()
        if now < self.next_check:
            return
        with self.lock:
            if now < self.next_check:
                return  # another thread took this period's check
            self.next_check = now + self.period
        self.check()

    def check(self):
        """Warn if the oldest due delivery has waited longer than the threshold."""
        opened = database.is_closed()
        try:
            age = oldest_due_age()
        except DATABASE_FAILURES:
            log.warning("could not read the age of the webhook backlog", exc_info=True)
            return
        finally:
            if opened:
                database.close()
        if age > self.threshold:
            log.warning("webhook deliveries are waiting for a worker: the oldest due one "
                        "has waited %.0f s (more than %g s); is a `plantstore worker` "
                        "running and claiming?", age, self.threshold)


_watch = None
"""This process's watch, made by ``watch``."""


def watch(threshold):
    """Watch this process's backlog, warning past ``threshold`` seconds
    (``PLANTSTORE_WEBHOOK_BACKLOG_WARN_SECONDS``)."""
    global _watch
    _watch = BacklogWatch(threshold)


def note_left_to_workers():
    """Say that this process left a delivery to the workers (it never raises).

    Cheap enough for every delivery: at most once a minute it reads the
    backlog's age from the database and warns when deliveries have waited
    for the workers longer than ``PLANTSTORE_WEBHOOK_BACKLOG_WARN_SECONDS``.
    """
    if _watch is None:
        return
    try:
        _watch.note()
    except Exception:  # a log line must never fail the sender
        log.exception("could not check the webhook backlog")
