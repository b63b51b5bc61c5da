"""The writer of one process's outcomes: one thread, batches of whatever waits.

Sender threads never touch the database: each attempt's result (and each
job given back unsent) is put here, and one thread writes everything that
has accumulated since its last write at once (``queue.record``: one
statement on PostgreSQL, two on SQLite). Once the first outcome of a batch
arrives it lets others gather for ``GATHER_SECONDS`` (unless somebody
waits for a flush, or ``LARGEST_WRITE`` wait already), as River's batch
completer does, so a write's cost is shared by many outcomes. A delivered
attempt's slot is free meanwhile (only its row stays leased that much
longer); a failed one's sender, which waits for its outcome, waits as long. It
decides nobody's slots; a sender whose attempt failed may wait for its
outcome to be written (``put`` gives it the event to wait on) before it
frees its slot, so that the next attempt at that receiver sees what the
failure did (an opened breaker, a subscription disabled by a 410).

No row can poison a batch (as River's batch completer): a write that
fails is tried again after ``RETRY_PAUSES`` (a database blip must not
leave the outcomes unwritten: their deliveries would be sent again once
their leases run out); if it still fails and the database is reachable,
the batch is split in halves, each written on its own, down to the one
row that fails alone, which is failed with a clear error instead of being
re-sent forever. The backlog is bounded: past ``BACKLOG_BOUND`` unwritten
outcomes, ``backlogged`` tells the worker to claim nothing until it drains.
"""
import logging
import os
import threading
import time

from ...db import database, is_unavailable
from ..engine import queue

log = logging.getLogger(__name__)

LARGEST_WRITE = 500
"""Most outcomes written at once."""

RETRY_PAUSES = (0.05, 0.25, 1.0)
"""Seconds between the tries of a batch's write (then it is split)."""

BACKLOG_BOUND = 2 * LARGEST_WRITE
"""Unwritten outcomes past which a worker claims nothing more."""

GATHER_SECONDS = 0.02
"""How long a batch's first outcome waits for others before they are written."""

IDLE_SECONDS = 5.0
"""The writer thread ends after this long with nothing to write (a new one
starts with the next outcome)."""


class OutcomeWriter:
    """Writes outcomes and give-backs in batches; ``on_written(kinds)`` is
    called with each batch's outcome kinds (None where nothing was written)."""

    def __init__(self, settings, on_written=None):
        self.settings = settings
        self.on_written = on_written
        self._changed = threading.Condition()
        self._outcomes, self._give_backs = [], []
        self._unwritten = 0  # put and not yet written (or given up)
        self._flushers = 0  # threads waiting in flush: write without gathering
        self._thread = None
        self._pid = None

    def put(self, job, result):
        """Have ``job``'s attempt ``result`` written. For a failed attempt, an
        event set once it is (or once writing it failed); None for a
        delivered one, which nobody waits for."""
        written = None if result.ok else threading.Event()
        self._add((job, result, written), is_outcome=True)
        return written

    def give_back(self, job):
        """Have ``job``'s lease cleared (it was not attempted)."""
        self._add(job, is_outcome=False)

    def _add(self, item, is_outcome):
        with self._changed:
            if self._pid != os.getpid():  # first use, or a forked child
                self._outcomes, self._give_backs, self._unwritten = [], [], 0
                self._thread, self._pid = None, os.getpid()
            (self._outcomes if is_outcome else self._give_backs).append(item)
            self._unwritten += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="webhook-outcomes",
                                                daemon=True)
                self._thread.start()
            if self._ends_gathering():
                self._changed.notify_all()

    def _ends_gathering(self):
        """Whether what was just put may end the writer thread's wait: the
        first of a batch (it starts gathering) and the one that fills a
        write. The others join the batch as it gathers without waking it (a
        wake per outcome costs the senders' CPU)."""
        waiting = len(self._outcomes) + len(self._give_backs)
        return waiting == 1 or len(self._outcomes) >= LARGEST_WRITE

    def unwritten(self):
        """How many outcomes and give-backs wait to be written."""
        with self._changed:
            return self._unwritten

    def backlogged(self):
        """Whether more outcomes wait than ``BACKLOG_BOUND``: claim nothing until they drain."""
        return self.unwritten() >= BACKLOG_BOUND

    def flush(self, timeout):
        """Wait until everything put so far is written; False on timeout."""
        with self._changed:
            self._flushers += 1
            self._changed.notify_all()
            try:
                return self._changed.wait_for(lambda: not self._unwritten, timeout)
            finally:
                self._flushers -= 1

    def _run(self):
        while True:
            with self._changed:
                if not self._changed.wait_for(lambda: self._outcomes or self._give_backs,
                                              IDLE_SECONDS):
                    self._thread = None
                    return
                self._changed.wait_for(
                    lambda: self._flushers or len(self._outcomes) >= LARGEST_WRITE,
                    GATHER_SECONDS)
                batch = self._outcomes[:LARGEST_WRITE]
                del self._outcomes[:LARGEST_WRITE]
                give_backs, self._give_backs = self._give_backs, []
            try:
                self._write([(job, result) for job, result, _ in batch], give_backs)
            finally:
                for _, _, written in batch:
                    if written is not None:
                        written.set()
                with self._changed:
                    self._unwritten -= len(batch) + len(give_backs)
                    self._changed.notify_all()

    def _write(self, batch, give_backs):
        kinds = [None] * len(batch)
        try:
            self._with_retries(queue.give_back, give_backs)
        except Exception:
            log.exception("webhook deliveries %s could not be given back; their leases "
                          "will run out and the workers retry them",
                          [job.delivery_id for job in give_backs])
        if batch:
            kinds = self._record(batch)
        if batch and self.on_written:
            self.on_written(kinds)

    def _with_retries(self, write, items):
        """``write(items)``, tried again after each of ``RETRY_PAUSES`` on failure."""
        for pause in (*RETRY_PAUSES, None):
            try:
                return write(items)
            except Exception:
                database.close()  # a broken connection is not reused
                if pause is None:
                    raise
                log.warning("writing webhook outcomes failed; trying again in %g s", pause,
                            exc_info=True)
                time.sleep(pause)

    def _record(self, batch):
        """Write ``batch``'s outcomes; their kinds (None where not written)."""
        try:
            return self._with_retries(lambda items: queue.record(items, self.settings), batch)
        except Exception as error:
            if is_unavailable(error):
                log.exception("webhook outcomes of deliveries %s could not be written: "
                              "the database is unavailable; their leases will run out and "
                              "the workers retry them", [job.delivery_id for job, _ in batch])
                return [None] * len(batch)
            if len(batch) > 1:  # split: only the row that fails alone is affected
                half = len(batch) // 2
                return self._record(batch[:half]) + self._record(batch[half:])
            job, _ = batch[0]
            log.exception("the outcome of delivery %s cannot be written; failing it",
                          job.delivery_id)
            try:
                failed = queue.fail_unwritable(job, f"{type(error).__name__}: {error}",
                                               self.settings)
            except Exception:
                log.exception("delivery %s could not be failed either; its lease will "
                              "run out and a worker retries it", job.delivery_id)
                return [None]
            return [queue.FAILED if failed else None]
