"""SPEC §5 storage: SQLite tuned for several gunicorn workers (WAL, busy
timeout, immediate write transactions), the schema made only by migrations,
and concurrent creates through a real gunicorn on the suite's backend."""
import os
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path

import pytest
import requests

from helpers import bearer, plantstore_env, run_plantstore
from plantstore import create_app, db
from plantstore.db.models import User
from plantstore.web.auth import issue_token

PACKAGE = Path(db.__file__).resolve().parent
CORE_TABLES = {"user", "token", "plant", "subscription", "delivery", "attempt"}


@pytest.fixture
def sqlite_app(tmp_path):
    """An app on a migrated SQLite file of its own, whatever the suite's backend."""
    path = tmp_path / "own.db"
    app = create_app({"TESTING": True, "DATABASE_URL": f"sqlite:///{path}"})
    db.upgrade()
    app.sqlite_path = path
    yield app
    db.database.close_all()


def tables(path):
    """The table names in the SQLite file at ``path``."""
    with closing(sqlite3.connect(path)) as connection:
        return {row[0] for row in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_sqlite_runs_in_wal_mode_with_a_busy_timeout(sqlite_app):
    with db.database.connection_context():
        assert db.database.execute_sql("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.database.execute_sql("PRAGMA busy_timeout").fetchone()[0] >= 5000
    # WAL is recorded in the file: every process opening it shares the mode.
    with closing(sqlite3.connect(sqlite_app.sqlite_path)) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_create_waits_for_another_writer_instead_of_failing(sqlite_app):
    with db.database.atomic():
        _, token = issue_token(User.create(name="alice"))
    db.database.close()
    other = sqlite3.connect(sqlite_app.sqlite_path, isolation_level=None,
                            check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock...
    release = threading.Timer(0.5, other.execute, ["COMMIT"])
    release.start()
    started = time.monotonic()
    try:
        response = sqlite_app.test_client().post(
            "/plants", json={"id": 1, "name": "fern"}, headers=bearer(token))
    finally:
        release.join()
        other.close()
    assert response.status_code == 200, response.data  # ...and the create waited
    assert time.monotonic() - started >= 0.4


def test_db_upgrade_creates_the_schema_the_app_never_creates_itself(tmp_path):
    path = tmp_path / "fresh.db"
    client = create_app({"TESTING": True, "DATABASE_URL": f"sqlite:///{path}"}).test_client()
    try:
        for url in ("/healthz", "/openapi.json"):
            assert client.get(url).status_code == 200
        assert client.get("/readyz").status_code == 503  # no schema: not ready
        assert tables(path) == set()
    finally:
        db.database.close_all()
    result = run_plantstore("db", "upgrade", cwd=tmp_path,
                            env={**os.environ, **plantstore_env(f"sqlite:///{path}")})
    assert result.returncode == 0, result.stderr
    assert tables(path) >= CORE_TABLES | {"schema_migration"}


def test_every_request_gives_its_connection_back(client, alice):
    for request in (lambda: client.get("/plants", headers=bearer(alice)),
                    lambda: client.post("/plants", json={"id": 1, "name": "fern"},
                                        headers=bearer(alice)),
                    lambda: client.delete("/plants/404", headers=bearer(alice)),
                    lambda: client.get("/readyz")):
        assert request().status_code in (200, 404)
        assert db.database.is_closed()


def test_only_migrations_call_create_tables():
    callers = [str(source.relative_to(PACKAGE)) for source in PACKAGE.rglob("*.py")
               if "create_tables" in source.read_text()
               and source.parent.name != "migrations"]
    assert callers == []


@pytest.mark.slow
def test_concurrent_creates_through_four_gunicorn_workers_all_succeed(
        gunicorn_server, make_token):
    """6 clients × 40 creates against 4 worker processes on one database."""
    server = gunicorn_server(workers=4)
    token = make_token("alice")
    clients, creates = 6, 40

    def create_many(client_number):
        statuses = []
        with requests.Session() as session:
            session.headers.update(bearer(token))
            for n in range(creates):
                plant_id = client_number * 1000 + n
                response = session.post(server.url + "/plants", timeout=30,
                                        json={"id": plant_id, "name": f"plant {plant_id}"})
                statuses.append((response.status_code, response.text))
        return statuses

    with ThreadPoolExecutor(clients) as pool:
        results = [s for batch in pool.map(create_many, range(clients)) for s in batch]
    failures = [result for result in results if result[0] != 200]
    assert failures == [], failures[:5]
    assert "database is locked" not in server.output()
    listing = requests.get(server.url + "/plants?limit=1000", headers=bearer(token), timeout=30)
    expected = [f"plant {c * 1000 + n}" for c in range(clients) for n in range(creates)]
    assert [plant["name"] for plant in listing.json()] == expected
