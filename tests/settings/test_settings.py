"""Configuration: every unusable setting is one line naming its variable, for
the command and the server alike; the command is plantstore's own."""
import os
import subprocess
import sys

import pytest

from helpers import REPO, free_port, run_plantstore
from plantstore import __version__, create_app
from plantstore.observability.logs import redact
from plantstore.settings import SettingError

PATH = {"PATH": "/usr/bin:/bin"}


def assert_one_line_error(result, *fragments):
    """Non-zero exit, nothing on stdout, one ``Error: ...`` line on stderr."""
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("Error: ")
    for fragment in fragments:
        assert fragment in line, line


@pytest.mark.parametrize("variable, value", [
    ("PLANTSTORE_DATABASE_URL", "mysql://db/plants"),
    ("PLANTSTORE_DATABASE_URL", "postgresql://postgres@127.0.0.1/test?max_connections=2"),
    ("PLANTSTORE_DATABASE_URL", "postgresql://postgres@127.0.0.1:99999/test"),
    ("PLANTSTORE_DATABASE_URL", "sqlite:///:memory:"),
    ("PLANTSTORE_WEBHOOK_READ_TIMEOUT", "1e999"),
    ("PLANTSTORE_WEBHOOK_RETRY_SCHEDULE", "inf"),
    ("PLANTSTORE_MAX_CONTENT_LENGTH", "-1"),
    ("PLANTSTORE_LIST_LIMIT_MAX", "1_000"),
    ("PLANTSTORE_DATABASE_POOL_SIZE", "lots"),
    ("PLANTSTORE_TOKEN_PREFIX", "a prefix with spaces"),
    ("PLANTSTORE_LOG_FORMAT", "xml"),
    ("PLANTSTORE_ENCRYPTION_KEYS", "not-a-fernet-key"),
])
def test_an_unusable_setting_is_one_line_naming_its_variable(variable, value):
    result = run_plantstore("users", "list", env={**PATH, variable: value})
    assert_one_line_error(result, variable)
    assert result.returncode == 1


def test_a_postgresql_url_without_its_driver_installed_is_one_line():
    without_drivers = ("import sys\n"
                       "sys.modules['psycopg2'] = sys.modules['psycopg'] = None\n"
                       "from plantstore.cli import main\n"
                       "sys.argv = ['plantstore', 'users', 'list']\n"
                       "main()")
    result = subprocess.run(
        [sys.executable, "-c", without_drivers], cwd=REPO, capture_output=True, text=True,
        env={**PATH, "PLANTSTORE_DATABASE_URL": "postgresql://postgres@127.0.0.1/x"},
        timeout=60)
    assert_one_line_error(result, "PLANTSTORE_DATABASE_URL", "psycopg2")


def test_an_unreachable_database_is_one_line():
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/plantstore"
    result = run_plantstore("db", "check", env={**PATH, "PLANTSTORE_DATABASE_URL": url})
    assert_one_line_error(result, "Connection refused")


def test_settings_have_bounds_and_are_named_when_passed_to_the_factory(database_url):
    with pytest.raises(SettingError, match="PLANTSTORE_WORKER_BATCH_SIZE"):
        create_app({"DATABASE_URL": database_url, "WORKER_BATCH_SIZE": 0})
    with pytest.raises(SettingError, match="PLANTSTORE_DATABASE_URL"):
        create_app({"DATABASE_URL": "oracle://db"})


def test_the_help_lists_plantstores_commands_only_and_the_version_is_plantstores():
    result = run_plantstore("--help", env=PATH)
    assert result.returncode == 0
    commands = result.stdout.split("Commands:")[1].split()
    listed = {word for word in commands if word.islower() and word.isalpha()}
    assert {"db", "users", "tokens", "webhooks", "deliveries", "worker"} <= listed
    assert not {"run", "shell", "routes"} & listed
    assert "--app" not in result.stdout and "--debug" not in result.stdout
    version = run_plantstore("--version", env=PATH)
    assert version.stdout.strip() == f"plantstore, version {__version__}"


def test_tokens_with_the_configured_prefix_are_redacted_from_logs(database_url):
    create_app({"DATABASE_URL": database_url, "TOKEN_PREFIX": "acme_"})
    assert redact("token acme_abcDEF123-_x here") == "token [REDACTED] here"


@pytest.mark.slow
def test_gunicorn_refuses_to_start_with_the_same_one_line(tmp_path):
    environment = {**os.environ, "PORT": str(free_port()),
                   "PLANTSTORE_DATABASE_URL": f"sqlite:///{tmp_path}/x.db",
                   "PLANTSTORE_WEBHOOK_CONNECT_TIMEOUT": "soon"}
    result = subprocess.run(
        [sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.conf.py", "wsgi:app"],
        cwd=REPO, env=environment, capture_output=True, text=True, timeout=60)
    assert_one_line_error(result, "PLANTSTORE_WEBHOOK_CONNECT_TIMEOUT")
