"""The migration runner: peewee's, made to give way to the live service.

A migration's DDL asks for strong table locks (``ALTER TABLE`` an ACCESS
EXCLUSIVE one, ``CREATE TRIGGER`` a SHARE ROW EXCLUSIVE one) and holds each
until its transaction ends. On PostgreSQL a lock request that waits makes
every later request for that table queue behind it, and a migration that
holds one table while it waits for another closes a cycle with any create
or outcome batch that holds the second and then reads the first: the
deadlock detector ends one of them after ``deadlock_timeout`` (1 s), and if
that is a create, its client gets a 503 in the middle of a rolling upgrade.

So on PostgreSQL each transactional migration runs with a short
``lock_timeout``: a lock it cannot have within it ends the try, rolls the
migration back (releasing every lock it took), and the migration is tried
again after a short pause, until ``TRY_FOR_SECONDS`` have passed. The
first try waits ``FIRST_LOCK_TIMEOUT_MS``, each next one half as long
again (under load a create's transaction can outlast the first), never
more than ``DEADLOCK_TIMEOUT_SHARE`` of the server's ``deadlock_timeout``.
The service waits at most that long for a lock the migration holds, and
no deadlock forms: the migration gives way before the detector, which
starts looking only after ``deadlock_timeout``, would pick a victim.

A migration marked ``atomic = False`` runs its own transactions: 0011 runs
each through ``giving_way``, one table per transaction; 0013 tries each
table's change the same way in its own loop. SQLite takes a database-wide
write lock with its own write wait: nothing to add there.

An operator runs it blind (``upgrade_lock.upgrading``: one upgrade at a time
per database); a migration kept from its locks says so at most every
``PROGRESS_SECONDS``, and one that gives up names the table, the session
holding it and what to do (``UpgradeError``).
"""
import collections
import logging
import random
import time

from playhouse.migrate import PostgresqlMigrator
from playhouse.migrations import Runner

log = logging.getLogger(__name__)

FIRST_LOCK_TIMEOUT_MS = 200
"""How long a migration's first try waits for any lock before it gives way."""

LOCK_TIMEOUT_GROWTH = 1.5
"""Each try waits this many times as long as the one before."""

DEADLOCK_TIMEOUT_SHARE = 0.5
"""The longest a try waits, as a share of the server's ``deadlock_timeout``
(half: a transaction may have begun waiting for a lock the migration took
before the migration began waiting; the rest of ``deadlock_timeout`` is the
migration's time between the two)."""

TRY_FOR_SECONDS = 300
"""How long the tries of one migration go on before the upgrade gives up."""

GIVE_WAY = ("55P03", "40P01")
"""The SQLSTATEs that end a try: lock_not_available, deadlock_detected."""

PAUSE_SECONDS = (0.05, 0.25)
"""The range a pause between two tries is drawn from (lets queued writers drain)."""

PROGRESS_SECONDS = 5.0
"""A blocked migration, or an upgrade waiting for another, says so at most this often."""

class UpgradeError(Exception):
    """An upgrade that could not go on, in one line for the operator."""


def sqlstate(error):
    """The SQLSTATE of a database error peewee wrapped, if any."""
    for found in (error, error.__cause__, error.__context__, *error.args[:1]):
        if getattr(found, "pgcode", None):
            return found.pgcode
    return None


def lock_timeouts_ms(deadlock_timeout_ms):
    """The ``lock_timeout`` of each try, in milliseconds, one try after another."""
    longest = max(1, int(deadlock_timeout_ms * DEADLOCK_TIMEOUT_SHARE))
    timeout = FIRST_LOCK_TIMEOUT_MS
    while True:
        yield min(int(timeout), longest)
        timeout *= LOCK_TIMEOUT_GROWTH


_times_gave_way = 0
"""How many times a transaction of this process gave way (the runner tells
each migration's share)."""


def giving_way(database, work, what):
    """``work()`` in a transaction of its own that waits a bounded time for
    each lock (``lock_timeouts_ms``), rolled back and tried again after a
    pause while it cannot have them, for up to ``TRY_FOR_SECONDS``; its result.

    For a migration marked ``atomic = False`` that changes one table per
    transaction (0011), so that it never holds one table while it waits for
    another; the runner runs every other migration so.
    """
    global _times_gave_way
    deadline = time.monotonic() + TRY_FOR_SECONDS
    [(deadlock_timeout_ms,)] = database.execute_sql(
        "SELECT setting::int FROM pg_settings WHERE name = 'deadlock_timeout'").fetchall()
    for lock_timeout_ms in lock_timeouts_ms(deadlock_timeout_ms):
        try:
            with database.atomic():
                database.execute_sql(f"SET LOCAL lock_timeout = '{lock_timeout_ms}ms'")
                return work()
        except Exception as error:
            if sqlstate(error) not in GIVE_WAY or time.monotonic() > deadline:
                raise
            _times_gave_way += 1
            log.debug("%s gave way to the service after %d ms (%s); trying again",
                      what, lock_timeout_ms, sqlstate(error))
        time.sleep(random.uniform(*PAUSE_SECONDS))


class GivingWayRunner(Runner):
    """peewee's migration runner; on PostgreSQL each transactional migration
    runs ``giving_way`` (``gave_way[name]`` counts the times, for the operator).
    Under ``upgrading``, its ``watch`` names what a migration waits for."""

    def __init__(self, *args, watch=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.gave_way = collections.Counter()
        self.watch = watch

    def _run(self, name, module, direction, fake=False):
        before = _times_gave_way
        if self.watch:
            self.watch.migration = name
            self.watch.pids.add(
                self.database.execute_sql("SELECT pg_backend_pid()").fetchone()[0])
        try:
            if (fake or not isinstance(self.migrator, PostgresqlMigrator)
                    or not getattr(module, "atomic", True)):
                return super()._run(name, module, direction, fake=fake)
            return giving_way(self.database,
                              lambda: super(GivingWayRunner, self)._run(name, module, direction),
                              f"{direction} {name}")
        except Exception as error:
            if self.watch and sqlstate(error) in GIVE_WAY:
                raise UpgradeError(self.watch.blocked_message(name)) from error
            raise
        finally:
            self.gave_way[name] += _times_gave_way - before
            if self.watch:
                self.watch.migration = None


class Progress:
    """Passes a line on to ``say`` at most once every ``PROGRESS_SECONDS``."""

    def __init__(self, say):
        self.say = say
        self._said_at = float("-inf")

    def __call__(self, line):
        if time.monotonic() - self._said_at >= PROGRESS_SECONDS:
            self._said_at = time.monotonic()
            self.say(line)
