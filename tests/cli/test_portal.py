"""``plantstore portal link`` and ``portal sessions end`` as an operator
types them: what they print, and every mistake one line with its exit status
(2 for a bad argument, 1 for a user or a setting), never a traceback."""
import os

import pytest

from helpers import plantstore_env, run_plantstore
from plantstore.db.models import PortalSession
from plugins.portal import PUBLIC_URL, enter

PORTAL = {"PORTAL_URL": PUBLIC_URL, "PORTAL_SECRET_KEY": "k" * 40}


@pytest.fixture
def portal_command(app, database_url, tmp_path):
    """Run the console script on the test's database with ``settings``."""
    def run(*args, **settings):
        return run_plantstore(*args, cwd=tmp_path, env={
            **os.environ, **plantstore_env(database_url, **settings)})
    return run


def only_line(stderr):
    assert "Traceback" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def test_a_link_is_printed_for_an_existing_user(portal_command, alice):
    result = portal_command("portal", "link", "alice", "--read-only", "--ttl", "2h", **PORTAL)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(PUBLIC_URL + "/portal/enter/plk_")
    assert "opens the portal once" in only_line(result.stderr)


@pytest.mark.parametrize("args, status, named", [
    (["portal", "link", "nobody"], 1, "no user named 'nobody'"),
    (["portal", "sessions", "end", "nobody"], 1, "no user named 'nobody'"),
    (["portal", "link", "alice", "--ttl", "10"], 2, "Invalid value for '--ttl'"),
    (["portal", "link", "alice", "--ttl", "25h"], 2, "from 60s to 24h"),
    (["portal", "link", "alice", "--ttl", "-5m"], 2, "Invalid value for '--ttl'"),
    (["portal", "link", "alice", "--ttl", "soon"], 2, "Invalid value for '--ttl'"),
    (["portal", "link", "alice", "--ttl", "9" * 40], 2, "Invalid value for '--ttl'"),
    (["portal", "link", "alice", "--ttl"], 2, "'--ttl' requires an argument"),
    (["portal", "link"], 2, "Missing argument 'NAME'"),
    (["portal", "link", " "], 2, "Invalid value for 'NAME'"),
])
def test_an_operators_mistake_is_one_line(portal_command, alice, args, status, named):
    result = portal_command(*args, **PORTAL)
    assert result.returncode == status, result.stderr
    assert result.stdout == ""
    line = only_line(result.stderr)
    assert line.startswith("Error: ") and named in line, line


def test_a_link_while_the_portal_is_off_is_one_line(portal_command, alice):
    result = portal_command("portal", "link", "alice")
    assert result.returncode == 1 and result.stdout == ""
    assert "PLANTSTORE_PORTAL_URL" in only_line(result.stderr)


def test_the_portal_on_without_a_signing_key_is_one_line(portal_command, alice):
    result = portal_command("portal", "link", "alice", PORTAL_URL=PUBLIC_URL,
                            ENCRYPTION_KEYS="")
    assert result.returncode == 1 and result.stdout == ""
    line = only_line(result.stderr)
    assert "PLANTSTORE_PORTAL_SECRET_KEY" in line and "PLANTSTORE_ENCRYPTION_KEYS" in line


@pytest.mark.app_config({**PORTAL, "WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8"})
def test_sessions_end_works_with_the_portal_off_and_says_how_many(
        portal_command, client, alice):
    enter(client, alice)
    result = portal_command("portal", "sessions", "end", "alice")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ended 1 portal session of alice\n"
    assert PortalSession.get().ended_at is not None
