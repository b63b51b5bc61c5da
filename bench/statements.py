"""Statements a server sends PostgreSQL, counted by ``pg_stat_statements``:
the calls of every statement run in one database, summed, read before and
after a measured window. BEGIN and COMMIT are statements too; the bench's
own reads run in another database, so they never count.

A server without the module loaded (``shared_preload_libraries``) counts
nothing: ``StatementCounter.connect`` then answers None and says why, and
the report prints "n/a". The bench's own cluster (databases.py) always
loads it.
"""
import contextlib

COUNTED_SQL = (
    "SELECT coalesce(sum(s.calls), 0) FROM pg_stat_statements s "
    "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = %s")
EVICTIONS_SQL = "SELECT dealloc FROM pg_stat_statements_info"


class StatementCounter:
    """Reads statement counts over one connection to the server's admin database."""

    def __init__(self, connection):
        self._connection = connection

    @classmethod
    def connect(cls, admin_url):
        """(a counter, None) when ``admin_url``'s server counts statements,
        else (None, the reason)."""
        import psycopg2
        connection = psycopg2.connect(admin_url)
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute("SHOW shared_preload_libraries")
            if "pg_stat_statements" not in cursor.fetchone()[0]:
                connection.close()
                return None, ("that server does not load pg_stat_statements "
                              "(shared_preload_libraries)")
            cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        return cls(connection), None

    def total(self, database):
        """(statements run in ``database`` so far, evictions so far).

        An eviction (more distinct statements than ``pg_stat_statements.max``)
        drops counts: a window with one is not a count.
        """
        with self._connection.cursor() as cursor:
            cursor.execute(COUNTED_SQL, (database,))
            statements = int(cursor.fetchone()[0])
            cursor.execute(EVICTIONS_SQL)
            return statements, cursor.fetchone()[0]

    def close(self):
        with contextlib.suppress(Exception):
            self._connection.close()


class Window:
    """Statements run in one database between ``__init__`` and ``per``."""

    def __init__(self, counter, database):
        self.counter, self.database = counter, database
        self.start = counter.total(database) if counter and database else None

    def per(self, requests):
        """Statements per request over the window, or None when not counted."""
        if self.start is None or not requests:
            return None
        statements, evictions = self.counter.total(self.database)
        if evictions != self.start[1]:
            return None
        return (statements - self.start[0]) / requests
