"""64-bit ids for deliveries, attempts and idempotency keys (contract).

``AFTER_ROLLOUT``: run only once every node runs this release. The release
before's functions declare their ids ``int`` and PL/pgSQL's ``RETURN
QUERY`` refuses a bigint column in them, so this must wait until no node
calls them: ``plantstore db upgrade --expand`` stops before this
migration, ``plantstore db upgrade`` applies it (docs/scaling.md).

On PostgreSQL each ``ALTER COLUMN ... TYPE bigint`` rewrites its table and
its indexes under an ACCESS EXCLUSIVE lock (no reads, no writes) for as
long as the rewrite takes. Each table changes in a transaction of its own,
and the lock is asked for with a short ``lock_timeout``, again and again,
never waited for: a waiting ALTER would queue every create and claim
behind it until the transactions ahead of it end (and could deadlock with
an outcome batch holding ``attempt`` while it asks for ``delivery``). So
the service waits only for the rewrite itself. docs/scaling.md says how to
do it online on a big table instead. SQLite: nothing to do, its INTEGER
ids are 64-bit.
"""
import random
import time

from playhouse.migrate import SqliteMigrator

AFTER_ROLLOUT = True
atomic = False  # one transaction per table (see below), not one for all

COLUMNS = {"delivery": ("id",), "attempt": ("id", "delivery_id"),
           "idempotency_key": ("id",)}
"""Each table's id columns, changed in one statement (one rewrite per table)."""

LOCK_TIMEOUT_MS = 200
"""How long one try waits for a table's lock before it gives way."""

TRY_FOR_SECONDS = 300
"""How long the tries go on for one table before the migration gives up."""

GIVE_WAY = ("55P03", "40P01")  # lock_not_available, deadlock_detected


def _sqlstate(error):
    """The SQLSTATE of a database error peewee wrapped, if any."""
    for found in (error, error.__cause__, error.__context__, *error.args[:1]):
        if getattr(found, "pgcode", None):
            return found.pgcode
    return None


def _alter(db, table, columns, to_type):
    """Change ``table``'s ``columns`` to ``to_type`` in a transaction of its
    own, trying for the lock until ``TRY_FOR_SECONDS`` have passed."""
    changes = ", ".join(f'ALTER COLUMN "{column}" TYPE {to_type}' for column in columns)
    deadline = time.monotonic() + TRY_FOR_SECONDS
    while True:
        try:
            with db.atomic():
                db.execute_sql(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT_MS}ms'")
                db.execute_sql(f'ALTER TABLE "{table}" {changes}')
            return
        except Exception as error:
            if _sqlstate(error) not in GIVE_WAY or time.monotonic() > deadline:
                raise
        time.sleep(random.uniform(0.05, 0.25))  # let the queue of writers drain


def up(migrator, db):
    if not isinstance(migrator, SqliteMigrator):
        for table, columns in COLUMNS.items():
            _alter(db, table, columns, "bigint")


def down(migrator, db):
    if not isinstance(migrator, SqliteMigrator):
        for table, columns in reversed(COLUMNS.items()):
            _alter(db, table, columns, "integer")
