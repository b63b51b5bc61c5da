"""Values an update replaced, removed from the database's files (not only
from its tables): for secrets re-encrypted under a new key, so that the
database holds nothing readable that the project can remove.

SQLite zeroes the pages it frees once told to (``secure_delete``) and keeps
old pages in its WAL file until a checkpoint; PostgreSQL keeps an updated
row's old version in the table's file until the table is rewritten.
"""
import random
import re
import time

from peewee import DatabaseError

from . import database, is_sqlite
from .runner import sqlstate


def zero_freed_space():
    """From now on, on this connection, zero the space deleted and replaced
    values free where the database can (SQLite's ``secure_delete``)."""
    if is_sqlite():
        database.execute_sql("PRAGMA secure_delete = ON")


VACUUM_LOCK_TIMEOUT_MS = 200
"""How long one try of ``VACUUM FULL`` waits for the table's lock: creates
that read subscriptions queue behind a waiting one, so it gives way soon."""

VACUUM_TRY_FOR_SECONDS = 60
"""How long ``remove_replaced_versions`` waits for older snapshots to end and for
the lock, in all, before it says it could not."""

_OLDER_SNAPSHOT = """
SELECT 'session ' || pid || ', in a transaction since ' || to_char(xact_start, 'HH24:MI:SS')
  FROM pg_stat_activity
 WHERE (datname = current_database() OR backend_type = 'walsender')
   AND backend_type <> 'autovacuum worker' AND pid <> pg_backend_pid()
   AND (age(backend_xmin) >= age(%(xid)s::text::xid)
        OR age(backend_xid) >= age(%(xid)s::text::xid))
UNION ALL
SELECT 'replication slot ' || slot_name FROM pg_replication_slots
 WHERE xmin IS NOT NULL AND age(xmin) >= age(%(xid)s::text::xid)
UNION ALL
SELECT 'prepared transaction ' || gid FROM pg_prepared_xacts
 WHERE database = current_database() AND age(transaction) >= age(%(xid)s::text::xid)
 LIMIT 1
"""
"""What holds PostgreSQL's horizon at or before transaction ``xid`` (a
snapshot, or a transaction, begun before it): while one does, ``VACUUM
FULL`` keeps the row versions replaced before ``xid`` (it copies every
version some transaction may still see)."""


def remove_replaced_versions(table, rerun):
    """Leave no copy of a value replaced in ``table`` in the database's files;
    None once done, else why not (a sentence naming what to run: ``rerun``,
    the command that replaced them, or SQL).

    PostgreSQL keeps an updated row's old version in the table's file: plain
    ``VACUUM`` only marks its space reusable (measured: after a reencrypt of
    2,000 plain-text subscriptions and a ``VACUUM``, 1,249 plain secrets were
    still in the file), so the table is rewritten by ``VACUUM FULL`` (which
    cannot run in a transaction), once nothing holds the horizon from before
    the rewrite, under an ACCESS EXCLUSIVE lock asked for with a short
    ``lock_timeout``, again and again, never waited for; its own count of the
    dead versions it had to keep says whether it is done. SQLite (whose
    freed pages ``secure_delete`` zeroed) folds its WAL file, which may hold
    the pages as they were, into the database and empties it."""
    if is_sqlite():
        busy, _, _ = database.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return ("the WAL file could not be emptied while readers used it: run "
                f"{rerun} again in a quiet moment") if busy else None
    deadline = time.monotonic() + VACUUM_TRY_FOR_SECONDS
    [(after,)] = database.execute_sql("SELECT mod(txid_current(), 4294967296)").fetchall()
    while True:
        holder = database.execute_sql(_OLDER_SNAPSHOT, {"xid": after}).fetchone()
        if holder is None:
            kept = _vacuum_full(table, deadline)
            if kept is None:
                return (f"the {table} table stayed locked for {VACUUM_TRY_FOR_SECONDS} s: "
                        f"run `VACUUM FULL {table}` in a quiet moment")
            if kept == 0:
                return None
        if time.monotonic() > deadline:
            return (f"{holder[0] if holder else 'a transaction begun before the rewrite'} "
                    "may still see the old values, which stay until it ends: then run "
                    f"`VACUUM FULL {table}`")
        time.sleep(0.2)


_KEPT = re.compile(r"(\d+) dead row versions cannot be removed yet")


def _vacuum_full(table, deadline):
    """``VACUUM FULL`` of ``table``, trying for its lock until ``deadline``: how
    many dead row versions it had to keep (PostgreSQL's own count), or None
    if it never had the lock."""
    connection = database.connection()
    database.execute_sql(f"SET lock_timeout = '{VACUUM_LOCK_TIMEOUT_MS}ms'")
    try:
        while True:
            del connection.notices[:]
            try:
                database.execute_sql(f'VACUUM (FULL, VERBOSE) "{table}"')
            except DatabaseError as error:
                if sqlstate(error) != "55P03":  # lock_not_available
                    raise
            else:
                return sum(int(found) for notice in connection.notices
                           for found in _KEPT.findall(notice))
            if time.monotonic() > deadline:
                return None
            time.sleep(random.uniform(0.05, 0.25))  # let the queue of writers drain
    finally:
        database.execute_sql("RESET lock_timeout")
