"""Sending leased jobs now: concurrently, each attempt recorded, never raising.

The create request hands its freshly written deliveries to ``send_after_commit``
and waits until they are sent and their outcomes written, at most one
attempt's bound (connect + read timeout) however many subscriptions there
are; attempts still running at the bound finish, and record themselves, in
the background. Workers use a ``DeliveryPool`` of their own for each
claimed batch.
"""
import concurrent.futures
import logging
import os
import threading
import time

from flask import current_app

from ..db import database
from ..models import Delivery
from . import outcomes, sender
from .config import settings_of

log = logging.getLogger(__name__)

REQUEST_POOL_THREADS = 16
"""Attempts one server process makes at once for its create requests."""


def deliver(job, settings):
    """Make one attempt at ``job`` and record its outcome; returns the outcome
    kind (None when it could not be recorded). Never raises."""
    try:
        result = sender.send(job, settings)
        return outcomes.record_outcome(job, result, settings)
    except Exception:
        log.exception("delivery %s (%s): the attempt could not be made or recorded",
                      job.delivery_id, job.message_id)
        return None


def release(job):
    """Give a leased job back to the workers at once (it was not attempted)."""
    with database.connection_context():
        (Delivery.update(locked_until=None)
         .where(Delivery.id == job.delivery_id,
                Delivery.locked_until == job.leased_until)
         .execute())


def _deliver_unless_late(job, settings, start_by):
    """``deliver``, unless the request stopped waiting before a thread was free."""
    if time.monotonic() > start_by:
        try:
            release(job)
        except Exception:
            log.exception("delivery %s: could not release its lease", job.delivery_id)
        return None
    return deliver(job, settings)


class DeliveryPool:
    """Threads that make attempts side by side (each with its own HTTP session)."""

    def __init__(self, threads):
        self.threads = threads
        self._executor = None
        self._pid = None
        self._lock = threading.Lock()

    def executor(self):
        """The thread pool of this process (a forked child builds its own)."""
        with self._lock:
            if self._executor is None or self._pid != os.getpid():
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    self.threads, thread_name_prefix="webhook-send")
                self._pid = os.getpid()
            return self._executor

    def deliver_all(self, jobs, settings):
        """Attempt every job, side by side; the outcome kinds, in job order."""
        futures = [self.executor().submit(deliver, job, settings) for job in jobs]
        return [future.result() for future in futures]

    def deliver_within(self, jobs, settings, seconds):
        """Attempt every job, waiting at most ``seconds`` for them all.

        Jobs not started by then are released to the workers; attempts under
        way finish (within their own timeouts) after this returns.
        """
        start_by = time.monotonic() + seconds
        futures = [self.executor().submit(_deliver_unless_late, job, settings, start_by)
                   for job in jobs]
        concurrent.futures.wait(futures, timeout=seconds)

    def shutdown(self):
        """Wait for attempts under way, then stop the threads."""
        with self._lock:
            if self._executor is not None and self._pid == os.getpid():
                self._executor.shutdown(wait=True)
            self._executor = None


_request_pool = DeliveryPool(REQUEST_POOL_THREADS)


def send_after_commit(jobs):
    """Attempt a create's deliveries right after its commit, within the bound.

    Called by the create request once the plant and its deliveries are
    committed. Whatever happens to the receivers, it returns within one
    attempt's connect + read timeout and raises nothing: a delivery it could
    not complete stays in the outbox for the workers.
    """
    if not jobs:
        return
    try:
        settings = settings_of(current_app)
        _request_pool.deliver_within(jobs, settings, settings.send_bound)
    except Exception:
        log.exception("webhook deliveries %s: sending after the commit failed; "
                      "the workers will send them", [job.message_id for job in jobs])
