"""Why a database that answers still cannot serve, in the operator's words:
a schema this release was not written for, and on SQLite a file deleted or
replaced under the running process, or a disk with no room left.

``/readyz`` asks ``find`` on every probe; a request whose statement failed
asks ``schema_fault`` whether the schema is why (a 503 naming it, rather
than a 500). Nothing here runs on a request that succeeds.

A schema is **older** than this release while a migration it needs is
pending: one before the first pending ``AFTER_ROLLOUT`` migration, as
``plantstore db upgrade --expand`` would apply it. It is **newer** when it
holds a migration this release does not know. A rolling upgrade runs the
release before beside the next one's expand migrations, so an unknown
migration stops readiness only when its name ends in ``_after_rollout``
(the next release's contract step: see docs/scaling.md); a statement that
fails while any unknown migration is applied is put down to it.
"""
import functools
import logging
import os

from playhouse.migrations import Migration

from . import MIGRATIONS_DIR, database, is_sqlite, missing_migrations

log = logging.getLogger(__name__)

CONTRACT_SUFFIX = "_after_rollout"
"""How a migration marked ``AFTER_ROLLOUT`` is named (0013 and those before
it excepted), so that a node of the release before knows it cannot run beside it."""

WRITE_PROBE_SECONDS = 0.5
"""SQLite: how long readiness waits to see a write begin (a turn lasts milliseconds)."""

MIN_FREE_BYTES = 1 << 20
"""SQLite: less room than this on the database's file system is a full disk
(a create appends a few pages to the WAL; a checkpoint copies up to 4 MB)."""


@functools.cache
def known_migrations():
    """The names of this release's migrations."""
    return frozenset(migration.name for migration in Migration.load_directory(MIGRATIONS_DIR))


def _applied():
    """The names in the migrations table, or None when it does not exist."""
    if not database.table_exists("schema_migration"):
        return None
    return {name for name, in database.execute_sql("SELECT name FROM schema_migration")}


def schema_problem(strict=False):
    """What makes the schema unfit for this release, as a sentence, or None.

    ``strict``: any migration this release does not know is a problem (a
    statement failed: it is the likely cause), not only a contract step.
    """
    applied = _applied()
    if applied is None:
        return ("the database holds no plantstore schema (an empty file, or another "
                "application's database?): run `plantstore db upgrade`")
    unknown = sorted(name for name in applied - known_migrations()
                     if strict or name.endswith(CONTRACT_SUFFIX))
    if unknown:
        return (f"the database schema is newer than this release: it holds "
                f"{', '.join(unknown)}, which this release does not know: run the "
                "release that applied it")
    needed = missing_migrations()
    if needed:
        return (f"the database schema is older than this release: {', '.join(needed)} "
                "not applied: run `plantstore db upgrade`")
    return None


def disk_problem():
    """SQLite: the database's file system nearly full, as a sentence, or None."""
    directory = os.path.dirname(os.path.abspath(database.obj.database))
    stat = os.statvfs(directory)
    free = (stat.f_bfree if os.geteuid() == 0 else stat.f_bavail) * stat.f_frsize
    if free < MIN_FREE_BYTES:
        return (f"the disk holding the database is full: {free} bytes free in {directory}; "
                "make room")
    return None


def find():
    """The first fault that keeps the database from serving, as a sentence, or
    None; the driver's error if the database does not answer. On SQLite also
    its file (deleted or replaced), its disk, and whether a write can begin
    within ``WRITE_PROBE_SECONDS``."""
    if not is_sqlite():
        return schema_problem()
    problem = database.obj.file_problem() or disk_problem() or schema_problem()
    if problem is None and not database.obj.writes_get_through(WRITE_PROBE_SECONDS):
        problem = "no write could begin within the write wait (a writer holds its turn)"
    return problem


def public(fault):
    """What a fault's sentence may tell anyone who asks (``/readyz`` needs no
    token): its kind, the part before the first colon, without paths or names."""
    return fault.split(": ", 1)[0]


def schema_fault():
    """Whether the schema is why a statement just failed: the sentence saying
    how, or None (a bug, or the schema cannot be read now)."""
    try:
        return schema_problem(strict=True)
    except Exception:  # the statement's failure stands as it is
        return None


_last_logged = None


def log_once(fault):
    """Log ``fault`` (one line) unless it is the last one this process logged;
    None (all is well again) is logged once when it follows a fault."""
    global _last_logged
    if fault != _last_logged:
        if fault:
            log.warning("database unavailable: %s", fault)
        else:
            log.info("database ready again")
        _last_logged = fault
