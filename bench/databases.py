"""Where a benchmark's servers keep their data: throwaway SQLite files, or
throwaway databases on a PostgreSQL server (``BENCH_POSTGRES_URL``, default
the local one), each made fresh for one server and dropped at the end."""
import os
from urllib.parse import urlsplit, urlunsplit

BACKENDS = ("sqlite", "postgres")
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


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

    def __init__(self, workdir):
        self.workdir = workdir

    def url(self, name):
        """A fresh plantstore database URL."""
        return f"sqlite:///{self.workdir}/{name}.db"

    def yardstick_env(self, name):
        """The environment that puts a yardstick on a fresh database."""
        return {"CEILING_DB": str(self.workdir / f"{name}.db")}

    def drop_all(self):
        """Nothing to do: the working directory goes with the run."""


class PostgresDatabases:
    """Databases named ``bench_<name>`` on one PostgreSQL server."""
    name = "postgres"

    def __init__(self, server_url=None):
        import psycopg2
        self.server_url = server_url or os.environ.get("BENCH_POSTGRES_URL") \
            or DEFAULT_POSTGRES_URL
        self._psycopg2 = psycopg2
        self.made = []

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

    def yardstick_env(self, name):
        """The environment that puts a yardstick on a fresh database."""
        return {"CEILING_DATABASE_URL": self.url(name)}

    def drop_all(self):
        """Drop every database this run made."""
        for database in self.made:
            self._admin(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        self.made.clear()


def backend(name, workdir):
    """The backend called ``name``."""
    return SqliteFiles(workdir) if name == "sqlite" else PostgresDatabases()
