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
``lock_timeout``: a lock it cannot have at once within ``LOCK_TIMEOUT_MS``
ends the try, rolls the migration back (releasing every lock it took), and
the migration is tried again after a short pause, until ``TRY_FOR_SECONDS``
have passed. The service waits at most ``LOCK_TIMEOUT_MS`` for a lock the
migration holds, and no deadlock forms, as the migration never waits long
enough for the detector to pick a victim. A migration marked ``atomic =
False`` (0013) manages its own transactions and tries the same way itself.
SQLite takes a database-wide write lock with its own write wait: nothing
to add there.
"""
import logging
import random
import time

from playhouse.migrate import PostgresqlMigrator
from playhouse.migrations import Runner

log = logging.getLogger(__name__)

LOCK_TIMEOUT_MS = 200
"""How long one try of a migration waits for any lock before it gives way
(well under PostgreSQL's default ``deadlock_timeout`` of 1 s)."""

TRY_FOR_SECONDS = 300
"""How long the tries of one migration go on before the upgrade gives up."""

GIVE_WAY = ("55P03", "40P01")
"""The SQLSTATEs that end a try: lock_not_available, deadlock_detected."""

PAUSE_SECONDS = (0.05, 0.25)
"""The range a pause between two tries is drawn from (lets queued writers drain)."""


def sqlstate(error):
    """The SQLSTATE of a database error peewee wrapped, if any."""
    for found in (error, error.__cause__, error.__context__, *error.args[:1]):
        if getattr(found, "pgcode", None):
            return found.pgcode
    return None


class GivingWayRunner(Runner):
    """peewee's migration runner; on PostgreSQL each transactional migration
    waits at most ``LOCK_TIMEOUT_MS`` for a lock, then tries again."""

    def _run(self, name, module, direction, fake=False):
        postgres = isinstance(self.migrator, PostgresqlMigrator)
        if fake or not postgres or not getattr(module, "atomic", True):
            return super()._run(name, module, direction, fake=fake)
        deadline = time.monotonic() + TRY_FOR_SECONDS
        while True:
            try:
                with self.database.atomic():
                    self.database.execute_sql(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT_MS}ms'")
                    return super()._run(name, module, direction)
            except Exception as error:
                if sqlstate(error) not in GIVE_WAY or time.monotonic() > deadline:
                    raise
                log.info("%s %s gave way to the service (%s); trying again",
                         direction, name, sqlstate(error))
            time.sleep(random.uniform(*PAUSE_SECONDS))
