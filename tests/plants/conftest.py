"""A throwaway PostgreSQL cluster that counts statements: the
``statement_counting_cluster`` fixture.

The cluster is PostgreSQL 15 started by the test in a temporary directory
(``initdb -A trust -U postgres``, ``pg_ctl``; as the ``postgres`` user when
the tests run as root) with ``pg_stat_statements`` loaded, counting
top-level statements only (``pg_stat_statements.track=top``; BEGIN and
COMMIT count too). It is stopped and removed afterwards, whatever
happened. Without PostgreSQL's server binaries the tests using it are
skipped, with the reason; under CI (``CI=true``) they fail instead.

Statements are counted for the role the service connects as
(``postgres``); the test reads and resets the counts as a role of its own
(``observer``), so its reads never count.
"""
import collections
import contextlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

import psycopg2
import pytest

from helpers import free_port

PG_BIN = "/usr/lib/postgresql/15/bin"
SERVICE_ROLE = "postgres"
OBSERVER_ROLE = "observer"
SAVEPOINT_NAME = re.compile(r'(SAVEPOINT\s+)"[^"]*"', re.IGNORECASE)
"""A savepoint's name, which pg_stat_statements keeps apart per name."""


@dataclass
class StatementCount:
    """One normalised statement and how many times it ran."""
    calls: int
    query: str


class StatementCountingCluster:
    """A PostgreSQL cluster of the test's own with pg_stat_statements loaded."""

    def __init__(self):
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="plantstore-pgss-")
        # PostgreSQL refuses to run as root: as root, it runs as postgres.
        self.as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.as_postgres:
            shutil.chown(self.dir, "postgres")
        self.data = os.path.join(self.dir, "data")

    def url(self, database, role=SERVICE_ROLE):
        """The URL of ``database`` on this cluster, as ``role``."""
        return f"postgresql://{role}@127.0.0.1:{self.port}/{database}"

    def _as_postgres(self, *args):
        done = subprocess.run([*self.as_postgres, *args],
                              capture_output=True, text=True, timeout=120)
        if done.returncode:
            raise RuntimeError(f"{os.path.basename(args[0])} failed: {done.stderr.strip()}")

    def start(self):
        """initdb, start, and make the observer role and the extension."""
        self._as_postgres(f"{PG_BIN}/initdb", "-A", "trust", "-U", SERVICE_ROLE,
                          "-D", self.data)
        self._as_postgres(
            f"{PG_BIN}/pg_ctl", "-D", self.data, "-w", "-t", "60",
            "-l", os.path.join(self.dir, "log"),
            "-o", f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 "
                  "-c shared_preload_libraries=pg_stat_statements "
                  "-c pg_stat_statements.track=top", "start")
        with self._connect("postgres", SERVICE_ROLE) as connection:
            connection.cursor().execute(f"CREATE ROLE {OBSERVER_ROLE} LOGIN SUPERUSER")
        with self.observer() as connection:
            connection.cursor().execute("CREATE EXTENSION pg_stat_statements")
        return self

    def remove(self):
        """Stop the cluster (at once) and delete its directory."""
        with contextlib.suppress(Exception):
            self._as_postgres(f"{PG_BIN}/pg_ctl", "-D", self.data, "-w", "-t", "60",
                              "-m", "immediate", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)

    @contextlib.contextmanager
    def _connect(self, database, role):
        connection = psycopg2.connect(self.url(database, role), connect_timeout=10)
        connection.autocommit = True
        try:
            yield connection
        finally:
            connection.close()

    def observer(self, database="postgres"):
        """A connection (context manager) as the observer role, whose
        statements are never counted against the service."""
        return self._connect(database, OBSERVER_ROLE)

    def create_database(self, name):
        """A new, empty database; its URL for the service's role."""
        with self.observer() as connection:
            connection.cursor().execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def reset_counts(self):
        """Forget every statement counted so far."""
        with self.observer() as connection:
            connection.cursor().execute("SELECT pg_stat_statements_reset()")

    def counts(self, database):
        """The service's statements in ``database`` since the last reset,
        most called first (savepoints of any name counted as one statement)."""
        with self.observer() as connection:
            cursor = connection.cursor()
            cursor.execute(
                "SELECT s.calls, s.query FROM pg_stat_statements s "
                "JOIN pg_database d ON d.oid = s.dbid "
                "JOIN pg_roles r ON r.oid = s.userid "
                "WHERE d.datname = %s AND r.rolname = %s", (database, SERVICE_ROLE))
            calls = collections.Counter()
            for count, query in cursor.fetchall():
                calls[SAVEPOINT_NAME.sub(r'\1"<name>"', query)] += count
        return [StatementCount(count, query) for query, count in
                sorted(calls.items(), key=lambda item: (-item[1], item[0]))]


def _binaries_missing():
    """Why a cluster cannot be started here, or None."""
    if not os.path.exists(f"{PG_BIN}/initdb"):
        return f"PostgreSQL 15's server binaries are not in {PG_BIN}"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "runuser is missing (as root, the cluster runs as the postgres user)"
    return None


@pytest.fixture(scope="module")
def statement_counting_cluster():
    """A started StatementCountingCluster for the module; removed afterwards."""
    missing = _binaries_missing()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"statement counts must run under CI: {missing}")
        pytest.skip(missing)
    cluster = StatementCountingCluster()
    try:
        yield cluster.start()
    finally:
        cluster.remove()
