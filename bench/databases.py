"""Where a benchmark's servers keep their data: throwaway SQLite files, or
throwaway databases on a PostgreSQL server, each made fresh for one server
and dropped at the end.

The PostgreSQL server is ``BENCH_POSTGRES_URL`` when set. Otherwise the
bench starts a cluster of its own (PostgreSQL 15's server binaries, in a
temporary directory, as the ``postgres`` user when run as root), loading
``pg_stat_statements`` so statements per request are counted, and removes
it at the end; without the binaries it uses the local server at
DEFAULT_POSTGRES_URL.
"""
import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
from urllib.parse import urlsplit, urlunsplit

BACKENDS = ("sqlite", "postgres")
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
PG_BIN = "/usr/lib/postgresql/15/bin"
CLUSTER_SETTINGS = (
    "-c listen_addresses=127.0.0.1 -c max_connections=400 "
    "-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=top "
    "-c pg_stat_statements.max=10000")
"""The bench's own cluster: PostgreSQL's defaults (fsync and synchronous
commit on), room for every server's connections, statements counted."""


def chosen(compare_yardsticks):
    """The backends ``BENCH_DATABASE`` names (sqlite, postgres or both);
    both by default with BENCH_COMPARE=1, else sqlite."""
    wanted = os.environ.get("BENCH_DATABASE") or ("both" if compare_yardsticks else "sqlite")
    if wanted == "both":
        return list(BACKENDS)
    if wanted not in BACKENDS:
        raise SystemExit(f"BENCH_DATABASE must be sqlite, postgres or both, not {wanted!r}")
    return [wanted]


class SqliteFiles:
    """SQLite files in the benchmark's working directory."""
    name = "sqlite"
    description = "SQLite files (WAL) in the bench's working directory"
    admin_url = None  # no server to count statements on

    def __init__(self, workdir):
        self.workdir = workdir

    def url(self, name):
        """A fresh plantstore database URL."""
        return f"sqlite:///{self.workdir}/{name}.db"

    def drop_all(self):
        """Nothing to do: the working directory goes with the run."""

    def close(self):
        """Nothing to do: the working directory goes with the run."""


class PostgresDatabases:
    """Databases named ``bench_<name>`` on one PostgreSQL server."""
    name = "postgres"

    def __init__(self, server_url):
        import psycopg2
        self.server_url = server_url
        self.description = f"the PostgreSQL server at {server_url}"
        self._psycopg2 = psycopg2
        self.made = []

    @property
    def admin_url(self):
        """The URL of the database the bench administers the server from."""
        return self.server_url

    def _admin(self, sql):
        connection = self._psycopg2.connect(self.server_url)
        connection.autocommit = True
        try:
            with connection.cursor() as cursor:
                cursor.execute(sql)
        finally:
            connection.close()

    def url(self, name):
        """A fresh, empty database's URL (any old one of that name is dropped)."""
        database = f"bench_{name}".replace("-", "_")
        self._admin(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        self._admin(f'CREATE DATABASE "{database}"')
        self.made.append(database)
        parts = urlsplit(self.server_url)
        return urlunsplit(parts._replace(path=f"/{database}"))

    def drop_all(self):
        """Drop every database this run made."""
        for database in self.made:
            self._admin(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        self.made.clear()

    def close(self):
        """Drop every database this run made."""
        self.drop_all()


class PostgresCluster(PostgresDatabases):
    """A PostgreSQL cluster of the bench's own, counting statements."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="plantstore-bench-pg-")
        self.data = os.path.join(self.dir, "data")
        self.as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.as_postgres:
            shutil.chown(self.dir, "postgres")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        try:
            self._run(f"{PG_BIN}/initdb", "-A", "trust", "-U", "postgres", "-D", self.data)
            self._run(f"{PG_BIN}/pg_ctl", "-D", self.data, "-w", "-t", "60",
                      "-l", os.path.join(self.dir, "log"),
                      "-o", f"-p {port} -k {self.dir} {CLUSTER_SETTINGS}", "start")
        except BaseException:
            self._remove()
            raise
        super().__init__(f"postgresql://postgres@127.0.0.1:{port}/postgres")
        self.description = (f"a PostgreSQL {self._version()} cluster of the bench's own "
                            "(defaults, fsync and synchronous commit on)")

    def _run(self, *argv):
        done = subprocess.run([*self.as_postgres, *argv], capture_output=True, text=True,
                              timeout=120)
        if done.returncode:
            raise RuntimeError(f"{os.path.basename(argv[0])} failed: {done.stderr.strip()}")

    def _version(self):
        connection = self._psycopg2.connect(self.server_url)
        try:
            with connection.cursor() as cursor:
                cursor.execute("SHOW server_version")
                return cursor.fetchone()[0].split()[0]
        finally:
            connection.close()

    def _remove(self):
        with contextlib.suppress(Exception):
            self._run(f"{PG_BIN}/pg_ctl", "-D", self.data, "-w", "-t", "60",
                      "-m", "fast", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)

    def close(self):
        """Stop the cluster and remove its directory."""
        self.made.clear()
        self._remove()


def _can_start_a_cluster():
    """True when PostgreSQL's server binaries are here and the bench may
    run them (as root, through runuser as the postgres user)."""
    if not os.path.exists(f"{PG_BIN}/initdb"):
        return False
    return os.geteuid() != 0 or shutil.which("runuser") is not None


def backend(name, workdir):
    """The backend called ``name`` (see the module's docstring)."""
    if name == "sqlite":
        return SqliteFiles(workdir)
    if os.environ.get("BENCH_POSTGRES_URL"):
        return PostgresDatabases(os.environ["BENCH_POSTGRES_URL"])
    if _can_start_a_cluster():
        return PostgresCluster()
    return PostgresDatabases(DEFAULT_POSTGRES_URL)
