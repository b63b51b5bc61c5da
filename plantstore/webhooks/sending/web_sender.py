"""The web process's sender: a create's deliveries attempted right after its commit.

A bounded pool of sender threads (``WEBHOOK_SENDS_PER_PROCESS``) shared
fairly between receivers and owners (``Slots``). ``offer`` never waits: a
job that finds no slot it may take is given back at once and left to the
workers, so a create's answer never waits for a receiver, and one user's
slow receivers never take the slots another user's creates need.
"""
import concurrent.futures
import logging
import os
import threading
import time

from ...observability import metrics
from ..engine import backlog, throttle
from .attempt import FINISH_MARGIN_SECONDS, attempt_and_put
from .outcome_writer import OutcomeWriter
from .slots import Slots

log = logging.getLogger(__name__)

class WebSender:
    """Attempts offered jobs on free slots; gives the others back."""

    def __init__(self, settings):
        self.settings = settings
        self.slots = Slots(settings.sends_per_process, settings.sends_per_receiver)
        self.writer = OutcomeWriter(settings)
        self._lock = threading.Lock()
        self._pool = None
        self._pid = None

    def offer(self, jobs, context=None):
        """Start an attempt at each job that may have a slot now, in the trace
        ``context`` (the create's); leave the others to the workers. Runs
        after a commit: never raises."""
        for job in jobs:
            try:
                started = (job.may_start(self.settings.send_bound)
                           and self._start(job, context))
            except Exception:  # the create has committed: it must not fail now
                log.exception("delivery %s: could not start its attempt", job.delivery_id)
                started = False
            if not started:
                metrics.count_left_to_worker("busy")
                self.writer.give_back(job)
                backlog.note_left_to_workers()

    def _start(self, job, context):
        pool = self._pool_of_this_process()
        if not self.slots.try_take(job):
            return False
        try:
            pool.submit(self._attempt, job, context)
        except BaseException:
            self.slots.release(job)
            raise
        return True

    def _pool_of_this_process(self):
        with self._lock:
            if self._pid != os.getpid():  # first use, or a forked child
                self.slots.reset()
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    self.slots.total, thread_name_prefix="webhook-send")
                self._pid = os.getpid()
            return self._pool

    def _attempt(self, job, context):
        try:
            if throttle.admits_stored(job, self.writer.give_back):  # else left to the workers
                attempt_and_put(job, self.settings, self.writer, context, token_taken=True)
        finally:
            self.slots.release(job)

    def finish(self):
        """Before the process stops: wait for the attempts under way (each ends
        by its deadline) and their outcomes, at most the deadline plus
        FINISH_MARGIN_SECONDS. Outcomes left unwritten are logged: their
        leases run out and the workers retry those deliveries."""
        deadline = time.monotonic() + self.settings.send_bound + FINISH_MARGIN_SECONDS
        if not (self.slots.wait_until_idle(self.settings.send_bound + FINISH_MARGIN_SECONDS)
                and self.writer.flush(max(0.0, deadline - time.monotonic()))):
            log.warning("webhook outcomes still unwritten at exit; their leases will "
                        "run out and the workers retry those deliveries")
