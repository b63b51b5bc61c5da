"""The index a filtered delivery log reads: one subscription's deliveries
of one status, newest first, ``(subscription_id, status, id)``.

The log (``webhooks/subscriptions/delivery_log.py``) reads each of a
user's subscriptions through ``(subscription_id, id)`` (0003); filtered by
status it read every delivery of the subscription until enough matched,
twenty for one failure in twenty. Through this index it reads the matching
ones alone. docs/performance.md has the figures on a million deliveries.

An index only: the release before runs on this schema unchanged.

On PostgreSQL it is built ``CONCURRENTLY`` (``atomic = False``): creates
and the workers' writes go on while it is built, where a plain build held
them back for as long as it took (seconds on a million deliveries). A build
that was stopped leaves an invalid index, dropped and built again by the
next run.
"""
from playhouse.migrate import SqliteMigrator

atomic = False  # PostgreSQL builds it CONCURRENTLY, outside any transaction

NAME = "delivery_subscription_status_id"
COLUMNS = "delivery (subscription_id, status, id)"
INVALID = ("SELECT count(*) FROM pg_index JOIN pg_class ON pg_class.oid = indexrelid "
           f"WHERE relname = '{NAME}' AND NOT indisvalid")


def up(migrator, db):
    if isinstance(migrator, SqliteMigrator):
        db.execute_sql(f"CREATE INDEX IF NOT EXISTS {NAME} ON {COLUMNS}")
        return
    if db.execute_sql(INVALID).fetchone()[0]:
        db.execute_sql(f"DROP INDEX CONCURRENTLY {NAME}")
    db.execute_sql(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {NAME} ON {COLUMNS}")


def down(migrator, db):
    concurrently = "" if isinstance(migrator, SqliteMigrator) else "CONCURRENTLY "
    db.execute_sql(f"DROP INDEX {concurrently}IF EXISTS {NAME}")
