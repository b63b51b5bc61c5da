"""The fixtures every test module uses: an app on a clean database, its
clients, and users with tokens.

The backend is SQLite (a fresh file per test) unless
``PLANTSTORE_TEST_DATABASE_URL`` names a PostgreSQL database, which is then
migrated once per session and emptied before every test.

Shared by several folders, and loaded here as plugins:
``plugins/servers.py`` (real gunicorn servers), ``plugins/webhooks.py``
(a webhook receiver, timing settings, outbox helpers),
``plugins/stalls.py`` (a create stalled inside its statement) and
``plugins/local_run.py`` (the service as a newcomer runs it). A folder's
own fixtures are its ``conftest.py`` (``api/``: a throwaway PostgreSQL
that counts statements; ``operations/``: an OTLP trace collector). Plain helpers that
tests call (``bearer``, ``assert_error``, ``wait_until``, ...) are in
``helpers.py``.
"""
import pytest

pytest.register_assert_rewrite("helpers")  # before any module imports it

from helpers import POSTGRES_URL  # noqa: E402
from plantstore import create_app, db  # noqa: E402
from plantstore.db.models import User  # noqa: E402
from plantstore.web.auth import ALL_SCOPES, issue_token  # noqa: E402
from plantstore.webhooks.config import web_sender_of  # noqa: E402

pytest_plugins = ["plugins.servers", "plugins.webhooks",
                  "plugins.stalls", "plugins.local_run", "plugins.throwaway_postgres"]


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


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "app_config(overrides): config the test's app is created with")


@pytest.fixture
def app_config(request):
    """Per-test config overrides: the closest ``app_config`` marker's (on the
    test, its class or its module), else none. A class or module may also
    override this fixture."""
    marker = request.node.get_closest_marker("app_config")
    return dict(marker.args[0]) if marker else {}


@pytest.fixture
def app(database_url, app_config):
    """The app bound to a clean, migrated database."""
    application = create_app({"TESTING": True, "DATABASE_URL": database_url, **app_config})
    if POSTGRES_URL:
        tables = ", ".join(f'"{table}"' for table in db.database.get_tables()
                           if table != db.migration_runner().table_name)
        with db.database.connection_context():
            db.database.execute_sql(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")
    else:
        db.upgrade()
    yield application
    # The attempts this test's creates started end (each by its deadline) and
    # their outcomes are written before the next test empties the tables.
    web_sender_of(application).finish()
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


@pytest.fixture
def alice(make_token):
    return make_token("alice")


@pytest.fixture
def bob(make_token):
    return make_token("bob")


@pytest.fixture
def admin(make_token):
    return make_token("root", admin=True)
