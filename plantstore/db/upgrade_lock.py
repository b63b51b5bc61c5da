"""One upgrade at a time per database: the lock an upgrade holds
(``upgrading``), and what a second one waiting for it says (whom for, and
what that one waits for). Two web units starting together each run the
migrations; the second waits and says whom for."""
import contextlib
import datetime
import fcntl
import os
import socket
import threading
import time

from peewee import SqliteDatabase

from .runner import Progress, UpgradeError
from .sqlite_folder import folder_problem

WAIT_FOR_OTHER_UPGRADE_SECONDS = 1800
"""How long an upgrade waits for another upgrade of the same database to end."""
LOOK_EVERY_SECONDS = 0.25
"""How often a waiting upgrade tries the lock again, and a running one looks
for sessions its migrations wait for."""
UPGRADE_LOCK = (1886154356, 1)
"""The advisory lock (``'plnt'``, 1) an upgrade holds on PostgreSQL."""


@contextlib.contextmanager
def upgrading(database, say):
    """Hold the database's upgrade lock for the block: on PostgreSQL an
    advisory lock (``UpgradeSession``), on SQLite an ``flock`` of
    ``<database>-upgrade``. While another upgrade holds it, wait up to
    ``WAIT_FOR_OTHER_UPGRADE_SECONDS``, saying whom for through ``say``
    (``UpgradeError`` after that). Yields the ``UpgradeSession`` watching
    the migrations' locks on PostgreSQL, whose connections opened inside the
    block carry the upgrade's ``application_name``; None on SQLite."""
    if isinstance(database.obj, SqliteDatabase):
        with _sqlite_upgrade_lock(database.obj.database, say):
            yield None
        return
    params = database.obj.connect_params
    named = params.get("application_name")
    params["application_name"] = \
        f"plantstore db upgrade {os.getpid()}@{socket.gethostname()}"[:63]
    database.close_idle()  # pooled connections opened before carry no such name
    session = UpgradeSession(database, say)
    session.start()
    try:
        session.wait_for_turn()
        yield session
    finally:
        session.end()
        if named is None:
            del params["application_name"]
        else:
            params["application_name"] = named
        database.close_idle()


@contextlib.contextmanager
def _sqlite_upgrade_lock(path, say):
    """``flock`` of ``<path>-upgrade``, whose holder writes who it is there
    (``UpgradeError`` if the database's folder cannot hold that file)."""
    try:
        fd = os.open(f"{path}-upgrade", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:
        raise UpgradeError(folder_problem(path, error)) from None
    try:
        began, progress, holder = time.monotonic(), Progress(say), None
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "a process"
                _wait_for_other(began, progress, holder)
        if holder:
            say(f"waited {time.monotonic() - began:.0f} s for another `plantstore db upgrade` "
                f"({holder}) to end")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the flock


def _wait_for_other(began, progress, holder):
    """One pause of an upgrade waiting for ``holder``'s; ``UpgradeError`` once
    it has waited ``WAIT_FOR_OTHER_UPGRADE_SECONDS``."""
    waited = time.monotonic() - began
    if waited > WAIT_FOR_OTHER_UPGRADE_SECONDS:
        raise UpgradeError(
            f"another `plantstore db upgrade` ({holder}) still runs after {waited:.0f} s; "
            "this one applied nothing: run it again once that one has ended")
    progress(f"waiting for another `plantstore db upgrade` ({holder}) to end")
    time.sleep(LOOK_EVERY_SECONDS)


WAITS_OF_THE_UPGRADE = """
SELECT waiting.locktype, waiting.relation::regclass::text, blocker.pid, blocker.state,
       blocker.query_start, blocker.xact_start, blocker.application_name,
       host(blocker.client_addr), blocker.query
FROM pg_stat_activity upgrade
JOIN pg_locks waiting ON waiting.pid = upgrade.pid AND NOT waiting.granted
CROSS JOIN LATERAL unnest(pg_blocking_pids(upgrade.pid)) AS blocking(pid)
JOIN pg_stat_activity blocker ON blocker.pid = blocking.pid
WHERE (upgrade.application_name = %s OR upgrade.pid = ANY(%s))
  AND upgrade.pid <> pg_backend_pid()
ORDER BY blocker.xact_start NULLS LAST
LIMIT 1
"""
"""What a session of this upgrade waits for, and the oldest session it waits behind."""

HOLDER_OF_THE_UPGRADE_LOCK = """
SELECT holder.pid, holder.backend_start, holder.application_name, host(holder.client_addr)
FROM pg_locks lock JOIN pg_stat_activity holder ON holder.pid = lock.pid
WHERE lock.locktype = 'advisory' AND lock.granted AND lock.classid = %s AND lock.objid = %s
  AND lock.objsubid = 2
  AND lock.database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""
"""The session holding another upgrade's lock."""


class UpgradeSession:
    """The upgrade's advisory lock on PostgreSQL, and a watch on what the
    upgrade's own sessions wait for, each on a connection of its own.

    The lock is transaction level, so PgBouncer in transaction mode keeps
    it on one server connection. Its transaction runs no statement once the
    lock is held: it keeps no snapshot, so ``CREATE INDEX CONCURRENTLY``,
    which waits for every transaction that held one when it began, never
    waits for the upgrade's own. Each try for the lock is a transaction of
    its own, so a waiting upgrade never holds back the running one's index
    builds either. The watch runs each look in a statement of its own and
    says the table (or the transaction) and the session holding a migration
    back, at most every ``PROGRESS_SECONDS``; its sessions are told by their
    ``application_name``, or their pid as the runner saw it."""

    def __init__(self, database, say):
        self.database, self.say = database, say
        self.application_name = database.obj.connect_params["application_name"]
        self.migration = None  # the migration running now, set by the runner
        self.pids = set()  # the runner's sessions (one, unless through PgBouncer)
        self.blocked = {}  # migration name → what it last waited for
        self._turn, self._done = threading.Event(), threading.Event()
        self._error = None
        self._holder = threading.Thread(target=self._hold_the_lock, name="upgrade-lock",
                                        daemon=True)
        self._watch = threading.Thread(target=self._watch_the_waits, name="upgrade-watch",
                                       daemon=True)

    def start(self):
        """Begin trying for the lock (``wait_for_turn`` waits for it)."""
        self._holder.start()

    def _hold_the_lock(self):
        try:
            with self.database.connection_context():
                self._take_the_lock_and_hold_it()
        except Exception as error:  # told to the upgrade by wait_for_turn
            self._error = error
            self._turn.set()

    def _take_the_lock_and_hold_it(self):
        began, progress = time.monotonic(), Progress(self.say)
        holder = None
        while True:
            with self.database.atomic():
                self.database.execute_sql("SET LOCAL idle_in_transaction_session_timeout = 0")
                if self.database.execute_sql("SELECT pg_try_advisory_xact_lock(%s, %s)",
                                             UPGRADE_LOCK).fetchone()[0]:
                    if holder:
                        self.say(f"waited {time.monotonic() - began:.0f} s for another "
                                 f"`plantstore db upgrade` ({holder}) to end")
                    self._turn.set()
                    self._done.wait()  # set by end(), whatever the upgrade's outcome
                    return
            rows = self.database.execute_sql(HOLDER_OF_THE_UPGRADE_LOCK, UPGRADE_LOCK).fetchall()
            holder = "a session that has ended since"
            if rows:
                pid, since, application, address = rows[0]
                holder = (f"PostgreSQL session pid {pid}, {application}, from "
                          f"{address or 'a local socket'}, connected {_utc(since)}")
            _wait_for_other(began, progress, holder)

    def _watch_the_waits(self):
        try:
            with self.database.connection_context():
                progress = Progress(self.say)
                while not self._done.wait(LOOK_EVERY_SECONDS):
                    self._look(progress)
        except Exception as error:  # the upgrade goes on, unwatched
            self.say(f"stopped looking for what the upgrade waits for: {error}")

    def _look(self, progress):
        """Note what the running migration waits for; say it now and then."""
        migration = self.migration
        rows = self.database.execute_sql(WAITS_OF_THE_UPGRADE,
                                         (self.application_name, list(self.pids))).fetchall()
        if migration and rows:
            self.blocked[migration] = rows[0]
            progress(f"{migration} waits for {_waited_for(rows[0])}; "
                     "giving way to the service and trying again")

    def wait_for_turn(self):
        """Return once the lock is held, and start the watch; the error that
        kept the lock from being held."""
        if not self._turn.wait(WAIT_FOR_OTHER_UPGRADE_SECONDS + 60):
            raise UpgradeError("the upgrade's lock could not be taken")
        if self._error is not None:
            raise self._error
        self._watch.start()

    def end(self):
        """Release the lock (its transaction ends); wait for both threads."""
        self._done.set()
        for thread in (self._watch, self._holder):
            if thread.is_alive():
                thread.join(timeout=60)

    def blocked_message(self, migration):
        """The line an upgrade ends with when ``migration`` could not have its locks."""
        seen = self.blocked.get(migration)
        if seen is None:
            return (f"{migration} gave up: every try met a lock the service held (lock "
                    "timeouts or deadlocks); run `plantstore db upgrade` again when the "
                    "service is quieter")
        pid = seen[2]
        return (f"{migration} gave up waiting for {_waited_for(seen)}: end that "
                f"session (SELECT pg_terminate_backend({pid})) or let it finish, then run "
                "`plantstore db upgrade` again")


def _waited_for(row):
    """A wait as the operator reads it: a lock on a table or a row, or an older
    transaction's end (``CREATE INDEX CONCURRENTLY``), and the session holding it."""
    locktype, table, pid, state, query_start, xact_start, application, address, query = row
    query = " ".join((query or "").split())
    session = (f"PostgreSQL session pid {pid} ({state}, from {address or 'a local socket'}"
               f"{f', application {application}' if application else ''}"
               f"; its transaction began {_utc(xact_start)}, its query {_utc(query_start)}: "
               f"{query[:80]!r})")
    if table:
        return f"a lock on table {table}, held by {session}"
    if locktype == "transactionid":
        return f"a lock on a row, held by {session}"
    return f"an older transaction to end, in {session}"


def _utc(moment):
    """A time of pg_stat_activity, as UTC."""
    if moment is None:
        return "-"
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
