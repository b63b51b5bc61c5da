"""The database: URL → peewee database, per-request connections, migrations.

Models bind to ``database``, a proxy that ``bind_database`` points at the
real database when a process is configured (never at import time), so one
process can serve SQLite in one test and PostgreSQL in the next.
"""
import collections
import logging
import os
from urllib.parse import parse_qsl, unquote, urlsplit

import peewee
from peewee import DatabaseProxy, InterfaceError, OperationalError, SqliteDatabase
from playhouse.pool import MaxConnectionsExceeded, PooledPostgresqlDatabase

from ..settings import SettingError
from ..settings.values import redacted_url
from .runner import GivingWayRunner
from .sqlite_turns import DEFAULT_WRITE_WAIT_SECONDS, FILE_REPLACED, TurnTakingSqliteDatabase
from .upgrade_lock import upgrading

log = logging.getLogger(__name__)

database = DatabaseProxy()

MIGRATIONS_DIR = os.path.join(os.path.dirname(__file__), "migrations")

# WAL lets readers run beside one writer; the busy timeout (the write wait,
# set per database) makes a writer wait for the lock instead of failing with
# "database is locked"; writes begin IMMEDIATE (see lock_type below) so a
# transaction never has to upgrade a read lock to a write lock, which is
# what deadlocks under concurrency.
SQLITE_PRAGMAS = {
    "journal_mode": "wal",
    "synchronous": "normal",
    "foreign_keys": 1,
}


class LocallyCheckedPostgresqlDatabase(PooledPostgresqlDatabase):
    """Pooled PostgreSQL that checks a connection it hands out without a round trip.

    peewee's pool sends ``SELECT 1`` on every check-out, holding the pool's
    lock meanwhile: a network round trip per request, serialised across the
    process's threads (a third of a list-10 request's database time). Here a
    connection is reused unless the driver already knows it is broken; one
    that died unnoticed (a server restart) fails the request it serves with
    a 503 and is discarded, and the next request gets a fresh one.
    """

    def _is_closed(self, conn):
        return bool(conn.closed) or not self._adapter.is_connection_reusable(conn)


# What a postgresql:// URL's query string may set: libpq connection options.
POSTGRES_URL_OPTIONS = frozenset({
    "application_name", "channel_binding", "connect_timeout", "gssencmode",
    "keepalives", "keepalives_count", "keepalives_idle", "keepalives_interval",
    "options", "passfile", "sslcert", "sslcrl", "sslkey", "sslmode", "sslrootcert",
    "target_session_attrs", "tcp_user_timeout",
})


def database_from_url(url, pool_size=8, sqlite_write_wait=DEFAULT_WRITE_WAIT_SECONDS):
    """Build the peewee database an URL describes (sqlite or postgresql);
    on SQLite a write waits at most ``sqlite_write_wait`` seconds for its turn.

    A URL that names no supported database, or whose driver is not
    installed, is a ``ValueError`` saying what to change, the URL's password
    hidden. The user name and password are percent-decoded, as libpq does.
    """
    shown = redacted_url(url)
    try:
        parts = urlsplit(url)
        if "@" not in parts.netloc and "@" in url.partition("://")[2][len(parts.netloc):]:
            raise ValueError("its user name or password holds a character that must be "
                             "percent-encoded: / as %2F, # as %23, ? as %3F, @ as %40")
        port = parts.port
    except ValueError as error:
        raise ValueError(f"{shown!r} is not a valid URL ({error})") from None
    scheme = parts.scheme.split("+")[0]
    if scheme == "sqlite":
        path = parts.path[1:] if parts.path.startswith("/") else parts.path
        if not path or path == ":memory:":
            raise ValueError(
                "an in-memory SQLite database is not shared between requests; "
                "use a file, e.g. sqlite:///plantstore.db")
        return TurnTakingSqliteDatabase(
            path, write_wait=sqlite_write_wait,
            pragmas={**SQLITE_PRAGMAS, "busy_timeout": int(sqlite_write_wait * 1000)},
            lock_type="IMMEDIATE",
            max_connections=pool_size, stale_timeout=300, timeout=10,
            check_same_thread=False)
    if scheme in ("postgres", "postgresql"):
        if peewee.psycopg2 is None and peewee.psycopg is None:
            raise ValueError("a postgresql:// URL needs the psycopg2 driver: "
                             "pip install 'plantstore[postgres]'")
        options = dict(parse_qsl(parts.query))
        unknown = sorted(set(options) - POSTGRES_URL_OPTIONS)
        if unknown:
            raise ValueError(f"unknown connection option(s) {', '.join(unknown)} in "
                             f"the URL; allowed: {', '.join(sorted(POSTGRES_URL_OPTIONS))}")
        return LocallyCheckedPostgresqlDatabase(
            parts.path.lstrip("/"), user=_decoded(parts.username),
            password=_decoded(parts.password),
            host=parts.hostname, port=port, max_connections=pool_size,
            stale_timeout=300, timeout=10, **options)
    raise ValueError(
        f"unsupported database URL scheme {parts.scheme!r}: "
        "use sqlite:///path.db or postgresql://user@host/dbname")


def _decoded(part):
    """A percent-encoded part of a URL (user name, password) as it is meant, or None."""
    return None if part is None else unquote(part)


DATABASE_NOW = {"postgresql": "(now() AT TIME ZONE 'UTC')",
                "sqlite": "strftime('%Y-%m-%d %H:%M:%f', 'now')"}
"""The database's current time in SQL, as timestamps are stored (naive UTC):
``{now}`` in a named statement (``named_sql``), and ``clock``'s."""


def answers():
    """Run one query on the bound database (``plantstore db check``): raises
    if it cannot."""
    database.execute_sql("SELECT 1").fetchone()


def configured_database(config):
    """The database a filled config names (``SettingError`` if its URL is unusable)."""
    try:
        return database_from_url(config["DATABASE_URL"], config["DATABASE_POOL_SIZE"],
                                 config["SQLITE_WRITE_WAIT_SECONDS"])
    except ValueError as error:
        raise SettingError(f"PLANTSTORE_DATABASE_URL is unusable: {error}") from None


DATABASE_FAILURES = (OperationalError, InterfaceError, MaxConnectionsExceeded)
"""What a query raises when the database may be unavailable (see ``is_unavailable``)."""

# SQLite says OperationalError for its own bugs' kin too ("no such table",
# syntax errors); only these mean the file is busy or out of reach.
SQLITE_UNAVAILABLE = ("database is locked", "unable to open database file",
                      "disk i/o error", "database is busy", "database or disk is full",
                      FILE_REPLACED)


def is_unavailable(error):
    """True when ``error`` means the database cannot serve now (down, restarting,
    out of connections, locked too long, its disk full, its file deleted), so
    that retrying later may succeed."""
    if isinstance(error, OperationalError) and is_sqlite():
        return str(error).lower().startswith(SQLITE_UNAVAILABLE)
    return isinstance(error, DATABASE_FAILURES)


def is_sqlite():
    """True when the bound database is SQLite (its locking differs)."""
    return isinstance(database.obj, SqliteDatabase)


def for_update(query):
    """``query``, locking the rows it reads until the transaction ends: on
    PostgreSQL (``FOR UPDATE``); SQLite's write transactions take turns and
    lock the whole database already."""
    return query if is_sqlite() else query.for_update()


def bind_database(config):
    """Point the proxy at the database ``config`` (the settings) names."""
    database.initialize(configured_database(config))


def init_database(app):
    """Give a request's connection back when the request ends, whatever
    happened in it (connections open lazily, on a request's first query)."""
    @app.teardown_request
    def release_connection(exc):
        if not database.is_closed():
            database.close()


def migration_runner(watch=None):
    """The migration runner for the package's numbered scripts (it gives way
    to the live service on PostgreSQL: see ``db.runner``)."""
    return GivingWayRunner(database, directory=MIGRATIONS_DIR, watch=watch)


def missing_migrations():
    """The pending migrations this release's code needs: every one but those
    marked ``AFTER_ROLLOUT`` (the code runs beside those). One that comes
    after a pending ``AFTER_ROLLOUT`` migration is needed too, though
    ``--expand`` stops before it: the last upgrade was not finished."""
    with database.connection_context():
        return [migration.name for migration in migration_runner().status()
                if not migration.applied and migration.path is not None
                and not getattr(migration.load(), "AFTER_ROLLOUT", False)]


Upgraded = collections.namedtuple("Upgraded", "applied left")
"""What ``upgrade`` did: (name, times it gave way) of each migration applied,
and the names of those ``--expand`` left for after the rollout."""


def upgrade(expand=False, say=log.info):
    """Apply every pending migration, one upgrade of the database at a time
    (``db.upgrade_lock.upgrading``: waiting for another, blocked migrations
    and why are told through ``say``); an ``Upgraded``.

    With ``expand``, stop before the first pending migration marked
    ``AFTER_ROLLOUT`` (one the release before cannot run beside: it waits
    until every node runs this release; see docs/scaling.md).
    """
    with upgrading(database, say) as watch, database.connection_context():
        runner = migration_runner(watch)
        pending = [migration for migration in runner.status()
                   if not migration.applied and migration.path is not None]
        target, left = None, []
        for migration in pending:
            if expand and (left or getattr(migration.load(), "AFTER_ROLLOUT", False)):
                left.append(migration.name)
            else:
                target = migration.name
        applied = runner.up(target) if target else []
        return Upgraded([(name, runner.gave_way[name]) for name in applied], left)
