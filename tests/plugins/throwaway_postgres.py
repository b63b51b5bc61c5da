"""A PostgreSQL cluster of a test's own, to stop and start: the
``throwaway_postgres`` fixture (tests of the database going away)."""
import os
import shutil
import subprocess
import tempfile

import pytest

from helpers import free_port

PG_BIN = "/usr/lib/postgresql/15/bin"


class ThrowawayPostgres:
    """A PostgreSQL cluster of the test's own, in a temporary directory."""

    def __init__(self):
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="plantstore-pg-")
        shutil.chown(self.dir, "postgres")
        self.data = os.path.join(self.dir, "data")
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args):
        subprocess.run(["runuser", "-u", "postgres", "--", *args], check=True,
                       capture_output=True, timeout=60)

    def init(self):
        self._run(f"{PG_BIN}/initdb", "-A", "trust", "-U", "postgres", "-D", self.data)
        return self

    def start(self):
        self._run(f"{PG_BIN}/pg_ctl", "-D", self.data, "-w", "-t", "30",
                  "-o", f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1",
                  "-l", os.path.join(self.dir, "log"), "start")

    def stop(self):
        self._run(f"{PG_BIN}/pg_ctl", "-D", self.data, "-w", "-t", "30", "-m", "fast", "stop")

    def remove(self):
        subprocess.run(["runuser", "-u", "postgres", "--", f"{PG_BIN}/pg_ctl", "-D",
                        self.data, "-m", "immediate", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def throwaway_postgres():
    if not os.path.exists(f"{PG_BIN}/initdb") or shutil.which("runuser") is None:
        pytest.skip("needs PostgreSQL 15's server binaries and runuser")
    server = ThrowawayPostgres().init()
    server.start()
    yield server
    server.remove()
