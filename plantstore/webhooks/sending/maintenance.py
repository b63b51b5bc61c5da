"""Housekeeping the webhook worker runs between deliveries: deleting what
outlived its keep (deliveries past their retention, expired idempotency
keys, rotated-out signing secrets whose overlap ended), and failing the
deliveries a create stored for a subscription as it was being disabled.
Every deployment with a database needs at least one worker running, even
with no webhook subscriptions, for these to run."""
import logging
import time

from ...db import database, is_unavailable
from ...web.idempotency_keys import purge_expired_keys
from ..engine import queue
from ..subscriptions import secrets

log = logging.getLogger(__name__)

INTERVAL_SECONDS = 10
"""How often the tasks run."""
BATCHES = 20
"""Most batches one run of a task deletes, so deliveries never wait long for it."""


def purge_old_deliveries(settings):
    """One retention batch: finished deliveries older than the retention."""
    deleted = queue.purge_batch(settings.retention_days)
    if deleted:
        log.info("webhook retention: deleted %d deliveries older than %d days",
                 deleted, settings.retention_days)
    return deleted


def purge_old_keys(settings):
    """One batch of idempotency keys past their time to live."""
    return purge_expired_keys()


def drop_ended_secret_overlaps(settings):
    """Rotated-out signing secrets whose overlap ended stop signing."""
    return secrets.drop_ended_overlaps()


def fail_stray_deliveries(settings):
    """Deliveries stored for a subscription while it was being disabled,
    after its waiting ones were failed: failed as well, as disabling says."""
    failed = queue.fail_stray_deliveries()
    if failed:
        log.info("webhook subscriptions disabled: failed %d deliveries stored for them "
                 "while they were being disabled", failed)
    return failed


TASKS = (purge_old_deliveries, purge_old_keys, drop_ended_secret_overlaps,
         fail_stray_deliveries)


class Maintenance:
    """Runs ``TASKS`` at most every INTERVAL_SECONDS; never raises. A database
    that cannot serve ends the run without a word: the worker's loop says it
    once per outage; any other failure is logged with its traceback."""

    def __init__(self, settings):
        self.settings = settings
        self._next_run = 0.0

    def run_if_due(self, force=False):
        """Run each task, batch after batch (at most BATCHES), if it is time."""
        now = time.monotonic()
        if not force and now < self._next_run:
            return
        self._next_run = now + INTERVAL_SECONDS
        for task in TASKS:
            try:
                for _ in range(BATCHES):
                    if not task(self.settings):
                        break
            except Exception as error:
                database.close()  # a connection that failed is not reused
                if is_unavailable(error):
                    return  # the worker's loop says so, once (worker.py); tried next time
                log.exception("maintenance task %s failed; it runs again in %ss",
                              task.__name__, INTERVAL_SECONDS)
