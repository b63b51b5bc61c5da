"""The ``plantstore`` command line: db, users and tokens.

What scripts depend on (exit codes, the token alone on stdout) runs the real
console script in a subprocess configured only by ``PLANTSTORE_DATABASE_URL``;
the rest runs in-process through the app's CLI runner, which is faster.
"""
import os
import re
import subprocess
from datetime import date, timedelta

import pytest
from playhouse.migrations import Migration

from helpers import PLANTSTORE, bearer, plantstore_env, run_plantstore
from plantstore import db

TOKEN = re.compile(r"pst_[A-Za-z0-9_-]{43}")


@pytest.fixture
def plantstore(database_url, tmp_path):
    """Run the console script on the test's database; returns the finished process."""
    def run(*args, url=database_url):
        return run_plantstore(*args, env={**os.environ, **plantstore_env(url)}, cwd=tmp_path)
    return run


@pytest.fixture
def cli(app, runner):
    """Run a command in-process, in an app context as the console script does."""
    def run(*args):
        with app.app_context():
            return runner.invoke(args=list(args))
    return run


def test_help_lists_the_command_groups(plantstore):
    result = plantstore("--help")
    assert result.returncode == 0
    commands = set(re.findall(r"^  (\w+)\s", result.stdout, re.MULTILINE))
    assert {"db", "users", "tokens"} <= commands


def test_db_upgrade_migrates_a_fresh_database_once_then_is_up_to_date(plantstore, tmp_path):
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    first = plantstore("db", "upgrade", url=url)
    every = "".join(f"applied {m.name}\n" for m in Migration.load_directory(db.MIGRATIONS_DIR))
    assert (first.returncode, first.stdout) == (0, every), first.stderr
    again = plantstore("db", "upgrade", url=url)
    assert (again.returncode, again.stdout) == (0, "up to date\n"), again.stderr


def test_db_upgrade_of_the_migrated_test_database_changes_nothing(plantstore, app):
    result = plantstore("db", "upgrade")
    assert (result.returncode, result.stdout) == (0, "up to date\n"), result.stderr


def test_users_create_then_duplicate_is_a_clear_error(plantstore, app):
    created = plantstore("users", "create", "alice")
    assert (created.returncode, created.stdout) == (0, "created user alice\n")
    duplicate = plantstore("users", "create", "alice")
    assert duplicate.returncode != 0
    assert duplicate.stdout == ""
    assert "already exists" in duplicate.stderr and "Traceback" not in duplicate.stderr


def test_users_create_refuses_an_empty_name(cli, app):
    result = cli("users", "create", " ")
    assert result.exit_code == 2 and "not a valid user name" in result.stderr


def test_tokens_create_prints_the_token_alone_and_it_works(plantstore, cli, client):
    assert cli("users", "create", "alice").exit_code == 0
    result = plantstore("tokens", "create", "alice")
    assert result.returncode == 0
    assert TOKEN.fullmatch(result.stdout.rstrip("\n")), result.stdout
    assert result.stdout.count("\n") == 1 and result.stderr == ""
    token = result.stdout.strip()
    assert client.get("/plants", headers=bearer(token)).status_code == 200


def test_token_captures_in_a_shell_variable(cli, database_url, tmp_path, client):
    assert cli("users", "create", "alice").exit_code == 0
    env = {**os.environ, "PLANTSTORE_DATABASE_URL": database_url,
           "PATH": f"{PLANTSTORE.parent}{os.pathsep}{os.environ['PATH']}"}
    shell = subprocess.run(["bash", "-c", 'TOKEN=$(plantstore tokens create alice) '
                            '&& printf "%s" "$TOKEN"'],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert shell.returncode == 0, shell.stderr
    assert TOKEN.fullmatch(shell.stdout), shell.stdout
    assert client.get("/plants", headers=bearer(shell.stdout)).status_code == 200


def test_admin_user_created_from_the_cli_sees_every_plant(cli, client, alice):
    assert client.post("/plants", json={"id": 7, "name": "fern"},
                       headers=bearer(alice)).status_code == 200
    assert cli("users", "create", "root", "--admin").exit_code == 0
    token = cli("tokens", "create", "root").stdout.strip()
    assert client.get("/plants", headers=bearer(token)).get_json() == [{"name": "fern"}]


def test_tokens_create_for_an_unknown_user_is_a_clear_error(plantstore, app):
    result = plantstore("tokens", "create", "nobody")
    assert result.returncode != 0
    assert result.stdout == ""
    assert "no user named 'nobody'" in result.stderr


def test_tokens_create_with_expiry_lists_the_expiry_date(cli, client):
    assert cli("users", "create", "alice").exit_code == 0
    token = cli("tokens", "create", "alice", "--expires-in", "30").stdout.strip()
    assert client.get("/plants", headers=bearer(token)).status_code == 200
    expected = date.today() + timedelta(days=30)
    listing = cli("tokens", "list", "alice").stdout
    assert re.search(rf"expires ({expected}|{expected + timedelta(days=1)})", listing), listing
    refused = cli("tokens", "create", "alice", "--expires-in", "0")
    assert refused.exit_code != 0 and refused.stdout == ""


def test_tokens_list_shows_hints_never_secrets_and_filters_by_user(cli, app):
    for name in ("alice", "bob"):
        assert cli("users", "create", name).exit_code == 0
    alice_token = cli("tokens", "create", "alice").stdout.strip()
    bob_token = cli("tokens", "create", "bob").stdout.strip()
    everyone = cli("tokens", "list").stdout
    lines = everyone.splitlines()
    assert [line.split("\t")[1] for line in lines] == ["alice", "bob"]
    assert alice_token not in everyone and bob_token not in everyone
    assert alice_token[:8] in lines[0] and "active" in lines[0]
    only_bob = cli("tokens", "list", "bob").stdout.splitlines()
    assert [line.split("\t")[1] for line in only_bob] == ["bob"]
    unknown = cli("tokens", "list", "nobody")
    assert unknown.exit_code != 0 and "no user named" in unknown.stderr


def test_tokens_revoke_makes_the_token_401(cli, client):
    assert cli("users", "create", "alice").exit_code == 0
    token = cli("tokens", "create", "alice").stdout.strip()
    token_id = cli("tokens", "list", "alice").stdout.split("\t")[0]
    revoked = cli("tokens", "revoke", token_id)
    assert (revoked.exit_code, revoked.stdout) == (0, f"revoked token {token_id}\n")
    assert client.get("/plants", headers=bearer(token)).status_code == 401
    assert "revoked" in cli("tokens", "list", "alice").stdout
    again = cli("tokens", "revoke", token_id)
    assert again.exit_code != 0 and "no active token" in again.stderr
