"""Shared fixtures: an app on a clean database, its clients, users with tokens,
and a real gunicorn serving the same database.

The backend is SQLite (a fresh file per test) unless
``PLANTSTORE_TEST_DATABASE_URL`` names a PostgreSQL database, which is then
migrated once per session and emptied before every test.
"""
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import requests

from plantstore import create_app, db
from plantstore.auth import ALL_SCOPES, issue_token
from plantstore.models import ALL_MODELS, User

REPO = Path(__file__).resolve().parents[1]
POSTGRES_URL = os.environ.get("PLANTSTORE_TEST_DATABASE_URL")


def _reset_postgres_schema(url):
    """Drop everything in the public schema so migrations start from nothing."""
    database = db.database_from_url(url)
    with database.connection_context():
        database.execute_sql("DROP SCHEMA public CASCADE")
        database.execute_sql("CREATE SCHEMA public")
    database.close_all()


@pytest.fixture(scope="session")
def postgres_migrated():
    """PostgreSQL, once per session: an empty schema, then every migration."""
    if not POSTGRES_URL:
        return None
    _reset_postgres_schema(POSTGRES_URL)
    create_app({"DATABASE_URL": POSTGRES_URL})
    db.upgrade()
    return POSTGRES_URL


@pytest.fixture
def database_url(tmp_path, postgres_migrated):
    """The URL of a migrated database that holds no rows."""
    if postgres_migrated:
        return postgres_migrated
    return f"sqlite:///{tmp_path / 'plantstore.db'}"


@pytest.fixture
def app_config():
    """Per-test config overrides; a test module may override this fixture."""
    return {}


@pytest.fixture
def app(database_url, app_config):
    """The app bound to a clean, migrated database."""
    application = create_app({"TESTING": True, "DATABASE_URL": database_url, **app_config})
    if POSTGRES_URL:
        tables = ", ".join(f'"{model._meta.table_name}"' for model in ALL_MODELS)
        with db.database.connection_context():
            db.database.execute_sql(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")
    else:
        db.upgrade()
    yield application
    db.database.close_all()


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def runner(app):
    return app.test_cli_runner()


@pytest.fixture
def make_token(app):
    """Create a user (if new) and return a fresh token for them."""
    def make(name="alice", admin=False, scopes=ALL_SCOPES, expires_in_days=None):
        with app.app_context(), db.database.atomic():
            user, _ = User.get_or_create(name=name, defaults={"is_admin": admin})
            _, secret = issue_token(user, scopes, expires_in_days)
        return secret
    return make


def bearer(token):
    """Request headers carrying ``token``."""
    return {"Authorization": f"Bearer {token}"}


def assert_error(response, status):
    """Check ``response`` is the contract's JSON error for ``status``; return its body.

    ``{"error": status, "message": "<sentence>"}``, optionally with
    ``"details": {field: [messages]}``, served as ``application/json``.
    """
    assert response.status_code == status, response.data
    assert response.mimetype == "application/json"
    body = response.get_json()
    assert set(body) <= {"error", "message", "details"}, body
    assert body["error"] == status
    assert isinstance(body["message"], str) and body["message"].strip()
    if "details" in body:
        assert body["details"] and all(
            isinstance(field, str) and messages
            and all(isinstance(m, str) for m in messages)
            for field, messages in body["details"].items()), body
    return body


@pytest.fixture
def alice(make_token):
    return make_token("alice")


@pytest.fixture
def bob(make_token):
    return make_token("bob")


@pytest.fixture
def admin(make_token):
    return make_token("root", admin=True)


def free_port():
    """A TCP port on loopback nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_up(url, process, seconds=30):
    """Poll ``url`` until it answers; fail if ``process`` exits first."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            requests.get(url, timeout=1)
            return
        except requests.ConnectionError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {seconds}s")


class Gunicorn:
    """A real gunicorn serving wsgi:app on a free loopback port."""

    def __init__(self, database_url, workers=2, env=None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "PLANTSTORE_DATABASE_URL": database_url,
                    "PORT": str(self.port), "WEB_CONCURRENCY": str(workers),
                    **(env or {})}
        self.process = None
        self.log = tempfile.TemporaryFile()

    def start(self):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.conf.py", "wsgi:app"],
            cwd=REPO, env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True)
        wait_until_up(self.url + "/healthz", self.process)
        return self

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def output(self):
        """Everything gunicorn and the app wrote so far."""
        self.log.seek(0)
        return self.log.read().decode(errors="replace")


def serve(server_class, database_url):
    """Yield a starter of ``server_class`` servers on the database; stop them all after."""
    servers = []

    def start(workers=2, env=None):
        server = server_class(database_url, workers, env).start()
        servers.append(server)
        return server
    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def gunicorn_server(app, database_url):
    """Start gunicorn (2 workers) on the test's database; stopped afterwards."""
    yield from serve(Gunicorn, database_url)
