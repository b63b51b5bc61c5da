"""SQLite's write turns: writers take turns, wait a bounded time, and a turn
that stops moving ties up one thread per process, never all of them."""
import fcntl
import os
import threading
import time

from peewee import OperationalError
from playhouse.pool import PooledSqliteDatabase

DEFAULT_WRITE_WAIT_SECONDS = 5.0
"""How long a write waits for its turn unless ``PLANTSTORE_SQLITE_WRITE_WAIT_SECONDS`` says."""


def locked():
    """What a writer that did not get its turn raises: SQLite's own words, so
    that it is answered like SQLite's busy timeout (a 503)."""
    return OperationalError("database is locked")


FILE_REPLACED = "database file deleted or replaced"
"""How the error begins when the file this process opened is no longer at its
path: a write would be acknowledged into a file nobody will read again, so
none is begun (a 503, as for SQLite's own "unable to open database file")."""


class TurnTakingSqliteDatabase(PooledSqliteDatabase):
    """Pooled SQLite whose write transactions take turns, between the threads
    of a process and between processes.

    SQLite lets one writer in at a time, and a writer that finds the lock
    taken sleeps in SQLite's busy handler (1, 2, 5, 10 ms and longer) before
    it tries again: under concurrent creates most of a create's time went
    to those sleeps, and two workers draining one backlog together drained
    it no faster than one. Threads of one process queue on a lock; processes
    on an advisory lock (``flock``) of a file beside the database
    (``<database>-writer``), looked at every ``TURN_POLL_SECONDS`` at most,
    so the next writer starts within about a millisecond of the last one's
    commit. SQLite's own lock still guards the data; these only order the
    writers.

    A writer waits at most ``turn_wait_seconds`` for its turn (the
    ``PLANTSTORE_SQLITE_WRITE_WAIT_SECONDS`` setting), then gets "database
    is locked". A turn lasts milliseconds; once this process's writers have
    waited ``STALLED_AFTER_SECONDS`` without any of them getting one (a
    writer that stopped while holding it: a process paused with SIGSTOP, a
    disk that hangs), the turn is stalled: the one writer already waiting
    for the other processes keeps its wait, every other one is refused at
    once, so a stall ties up at most one thread per process and
    ``/healthz`` and reads keep being served. The price: a legitimate write
    holding the turn longer than that (a big purge) is answered 503 with
    ``Retry-After`` instead of waited for.
    """

    TURN_POLL_SECONDS = 0.001
    STALLED_AFTER_SECONDS = 0.5
    REFUSAL_CHECK_SECONDS = 0.02  # how often a writer in line looks for a stall

    def __init__(self, *args, write_wait=DEFAULT_WRITE_WAIT_SECONDS, **kwargs):
        super().__init__(*args, **kwargs)
        self._writer = threading.Lock()
        self._writing = threading.local()
        self.turn_wait_seconds = write_wait
        self._line = threading.Lock()  # guards the two below
        self._in_line = 0  # writers of this process waiting for a turn
        self._line_moved_at = None  # when one of them last got it (or the first came)
        self._turns = None  # (pid, the open -writer file); a forked child opens its own
        # The file at the path now (a gunicorn worker's, at boot, before its
        # first connection), else the one the first connection makes.
        self._opened = _identity(self.database)

    def _connect(self):
        """A connection (pooled or new), refused while the file at the path is
        not the one found first: a new connection would otherwise open (or
        create, empty) whatever is there now."""
        self.check_file()
        connection = super()._connect()
        if self._opened is None:
            self._opened = _identity(self.database)
        return connection

    def file_problem(self):
        """Why the file at the path is not the one this process opened
        (deleted, or another put there), as a sentence (``FILE_REPLACED``
        first), or None. One ``stat``."""
        if self._opened is None:
            return None
        now = _identity(self.database)
        if now == self._opened:
            return None
        what = "deleted" if now is None else "replaced by another file"
        return (f"{FILE_REPLACED}: {os.path.abspath(self.database)} was {what} after this "
                "process opened it; writes are refused so that none is lost in a file "
                "nobody reads: restart plantstore to use the file now there")

    def check_file(self):
        """``OperationalError`` if ``file_problem`` finds one: a write begins only after it."""
        problem = self.file_problem()
        if problem:
            raise OperationalError(problem)

    def begin(self, lock_type=None):
        self.check_file()
        self._take_turn(self.turn_wait_seconds, lambda: super(
            TurnTakingSqliteDatabase, self).begin(lock_type))

    def turn_stalled(self):
        """True while this process's writers wait and none got a turn for
        ``STALLED_AFTER_SECONDS``."""
        with self._line:
            return self._stalled(time.monotonic())

    def _stalled(self, now):
        return (self._in_line > 0 and self._line_moved_at is not None
                and now - self._line_moved_at > self.STALLED_AFTER_SECONDS)

    def writes_get_through(self, within):
        """True when a write transaction can begin within ``within`` seconds
        (begun and rolled back at once: nothing is written)."""
        if self.turn_stalled():
            return False
        connection = self.connection()
        saved, = connection.execute("PRAGMA busy_timeout").fetchone()
        connection.execute(f"PRAGMA busy_timeout = {int(within * 1000)}")
        try:
            self._take_turn(within, lambda: connection.execute("BEGIN IMMEDIATE"))
        except OperationalError:
            return False
        finally:
            connection.execute(f"PRAGMA busy_timeout = {int(saved)}")
        self.rollback()
        return True

    def _take_turn(self, wait, begin):
        """Wait up to ``wait`` seconds for the turn, then ``begin()`` the
        transaction; ``locked()`` if the turn does not come or is stalled."""
        started = time.monotonic()
        deadline = started + wait
        with self._line:
            if self._stalled(started):
                raise locked()
            self._in_line += 1
            if self._in_line == 1:
                self._line_moved_at = started
        turns, got_turn = None, False
        try:
            while not self._writer.acquire(
                    timeout=max(0, min(self.REFUSAL_CHECK_SECONDS, deadline - time.monotonic()))):
                if time.monotonic() >= deadline or self.turn_stalled():
                    raise locked()
            try:
                turns = self._take_process_turn(deadline)
                begin()
                got_turn = True
            except BaseException:
                if turns is not None:
                    fcntl.flock(turns, fcntl.LOCK_UN)
                self._writer.release()
                raise
        finally:
            with self._line:
                self._in_line -= 1
                if got_turn or self._in_line == 0:
                    self._line_moved_at = time.monotonic()
        self._writing.active, self._writing.turns = True, turns

    def _take_process_turn(self, deadline):
        """Lock the -writer file for this process (None if it cannot be opened:
        then SQLite's busy handler alone orders the processes)."""
        if self._turns is None or self._turns[0] != os.getpid():
            try:
                self._turns = (os.getpid(), open(self.database + "-writer", "ab"))
            except OSError:
                self._turns = (os.getpid(), None)
        turns = self._turns[1]
        if turns is None:
            return None
        pause = self.TURN_POLL_SECONDS / 8
        while True:
            try:
                fcntl.flock(turns, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return turns
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise locked() from None
                time.sleep(pause)
                pause = min(2 * pause, self.TURN_POLL_SECONDS)

    def commit(self):
        try:
            return super().commit()
        finally:
            self._end_turn()

    def rollback(self):
        """Roll back, unless SQLite already has (it does after some errors, a
        full disk among them: ``ROLLBACK`` would then fail with "no
        transaction is active" and hide the error that ended the transaction)."""
        try:
            connection = self._state.conn
            if connection is None or connection.in_transaction:
                return super().rollback()
        finally:
            self._end_turn()

    def _end_turn(self):
        if getattr(self._writing, "active", False):
            self._writing.active = False
            if self._writing.turns is not None:
                fcntl.flock(self._writing.turns, fcntl.LOCK_UN)
            self._writer.release()


def _identity(path):
    """Which file is at ``path``: its device and inode; None when there is none."""
    try:
        stat = os.stat(path)
    except OSError:  # none there, or out of reach (SQLite will say so)
        return None
    return stat.st_dev, stat.st_ino
