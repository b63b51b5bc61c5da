"""The database's clock: every time one process writes and another compares.

Hosts' clocks disagree (drift, NTP steps, a misconfigured node), so a time
that one process writes and another compares (a lease, a due time, a breaker
probe, an idempotency key's expiry, a token's expiry, a retention cutoff) is
computed by the database, in the statement that writes or compares it. Use
these as values in peewee expressions, e.g.
``Delivery.update(locked_until=clock.after(30))`` or
``Token.expires_at > clock.now()``.

On PostgreSQL they are SQL: ``now()`` (the start of the current
transaction, in UTC). SQLite serves one host, so there the process's own
clock is that host's clock, passed as a value through the same code.
Within one process, measure elapsed time with ``time.monotonic()``.
"""
import datetime

from peewee import SQL

from . import DATABASE_NOW, database, is_sqlite

POSTGRES_NOW = DATABASE_NOW["postgresql"]


def local_now():
    """This process's clock in UTC, naive (how timestamps are stored); only
    for times nobody else compares (logs, a row's own ``created_at``)."""
    return datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)


def now():
    """The database's current time (naive UTC), as a peewee value."""
    if is_sqlite():
        return local_now()
    return SQL(POSTGRES_NOW)


def after(seconds):
    """The database's current time plus ``seconds`` (negative: before)."""
    if is_sqlite():
        return local_now() + datetime.timedelta(seconds=seconds)
    return SQL(f"({POSTGRES_NOW} + %s * interval '1 second')", [float(seconds)])


def read():
    """The database's current time, read as a value (naive UTC): for a
    horizon passed back to later statements. On PostgreSQL one round trip."""
    if is_sqlite():
        return local_now()
    return database.execute_sql(f"SELECT {POSTGRES_NOW}").fetchone()[0]


def before(seconds):
    """The database's current time minus ``seconds``."""
    return after(-seconds)
