"""64-bit ids for deliveries, attempts and idempotency keys (contract).

``AFTER_ROLLOUT``: run only once every node runs this release. The release
before's functions declare their ids ``int`` and PL/pgSQL's ``RETURN
QUERY`` refuses a bigint column in them, so this must wait until no node
calls them: ``plantstore db upgrade --expand`` stops before this
migration, ``plantstore db upgrade`` applies it (docs/scaling.md).

On PostgreSQL each ``ALTER COLUMN ... TYPE bigint`` rewrites its table and
its indexes under an ACCESS EXCLUSIVE lock (no reads, no writes) for as
long as the rewrite takes; docs/scaling.md says how to do it online on a
big table instead. SQLite: nothing to do, its INTEGER ids are 64-bit.
"""
from playhouse.migrate import SqliteMigrator

AFTER_ROLLOUT = True

COLUMNS = {"delivery": ("id",), "attempt": ("id", "delivery_id"),
           "idempotency_key": ("id",)}
"""Each table's id columns, changed in one statement (one rewrite per table)."""


def _alter(db, table, columns, to_type):
    changes = ", ".join(f'ALTER COLUMN "{column}" TYPE {to_type}' for column in columns)
    db.execute_sql(f'ALTER TABLE "{table}" {changes}')


def up(migrator, db):
    if not isinstance(migrator, SqliteMigrator):
        for table, columns in COLUMNS.items():
            _alter(db, table, columns, "bigint")


def down(migrator, db):
    if not isinstance(migrator, SqliteMigrator):
        for table, columns in reversed(COLUMNS.items()):
            _alter(db, table, columns, "integer")
