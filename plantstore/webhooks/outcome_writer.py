"""The writer of one process's outcomes: one thread, batches of whatever waits.

Sender threads never touch the database: each attempt's result (and each
job given back unsent) is put here, and one thread writes everything that
has accumulated since its last write at once (``queue.record``: one
statement on PostgreSQL). While it writes, more accumulate, so a busy
process writes many outcomes per statement without waiting on purpose. It
decides nobody's slots; a sender whose attempt failed may wait for its
outcome to be written (``put`` gives it the event to wait on) before it
frees its slot, so that the next attempt at that receiver sees what the
failure did (an opened breaker, a subscription disabled by a 410).
"""
import logging
import os
import threading

from . import queue

log = logging.getLogger(__name__)

LARGEST_WRITE = 500
"""Most outcomes written at once."""

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
        self._thread = None
        self._pid = None

    def put(self, job, result):
        """Have ``job``'s attempt ``result`` written; an event set once it is
        (or once writing it failed)."""
        written = threading.Event()
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
            self._changed.notify_all()

    def unwritten(self):
        """How many outcomes and give-backs wait to be written."""
        with self._changed:
            return self._unwritten

    def flush(self, timeout):
        """Wait until everything put so far is written; False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._unwritten, timeout)

    def _run(self):
        while True:
            with self._changed:
                if not self._changed.wait_for(lambda: self._outcomes or self._give_backs,
                                              IDLE_SECONDS):
                    self._thread = None
                    return
                batch = self._outcomes[:LARGEST_WRITE]
                del self._outcomes[:LARGEST_WRITE]
                give_backs, self._give_backs = self._give_backs, []
            try:
                self._write([(job, result) for job, result, _ in batch], give_backs)
            finally:
                for _, _, written in batch:
                    written.set()
                with self._changed:
                    self._unwritten -= len(batch) + len(give_backs)
                    self._changed.notify_all()

    def _write(self, batch, give_backs):
        kinds = [None] * len(batch)
        try:
            queue.give_back(give_backs)
            if batch:
                kinds = queue.record(batch, self.settings)
        except Exception:
            log.exception("webhook outcomes of deliveries %s could not be written; "
                          "their leases will run out and the workers retry them",
                          [job.delivery_id for job, _ in batch]
                          + [job.delivery_id for job in give_backs])
        if batch and self.on_written:
            self.on_written(kinds)
