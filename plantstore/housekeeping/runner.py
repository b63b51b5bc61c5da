"""The one runner of the housekeeping tasks, which the webhook worker calls
between claims: each task batch after batch, at most every few seconds."""
import logging
import time

from ..db import database, is_unavailable
from . import idempotency_keys, old_deliveries, secret_overlaps, stray_deliveries

log = logging.getLogger(__name__)

INTERVAL_SECONDS = 10
"""How often the tasks run."""
BATCHES = 20
"""Most batches one run of a task deletes, so deliveries never wait long for it."""

TASKS = (old_deliveries, idempotency_keys, secret_overlaps, stray_deliveries)
"""The tasks, in the order they run: each module's ``run(settings)`` does one
batch and says how many rows it changed."""


class Housekeeping:
    """Runs ``TASKS`` at most every INTERVAL_SECONDS; never raises. A database
    that cannot serve ends the run without a word: the worker's loop says it
    once per outage; any other failure is logged with its traceback."""

    def __init__(self):
        self._next_run = 0.0

    def run_if_due(self, settings, force=False):
        """Run each task, batch after batch (at most BATCHES), if it is time."""
        now = time.monotonic()
        if not force and now < self._next_run:
            return
        self._next_run = now + INTERVAL_SECONDS
        for task in TASKS:
            try:
                for _ in range(BATCHES):
                    if not task.run(settings):
                        break
            except Exception as error:
                database.close()  # a connection that failed is not reused
                if is_unavailable(error):
                    return  # the worker's loop says so, once (worker.py); tried next time
                log.exception("housekeeping task %s failed; it runs again in %ss",
                              task.__name__.rpartition(".")[2], INTERVAL_SECONDS)
