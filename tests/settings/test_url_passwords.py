"""No error line prints a database URL's password: not a URL refused as
malformed (a password holding ``/``, ``#`` or a space), not one refused for
its options, not the web server's refusal to start."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO, free_port, plantstore_env, run_plantstore
from plantstore.db import database_from_url
from plantstore.settings.values import redacted_url

SECRET = "s3cr/et#pw"
"""What each URL below holds as its password, more or less encoded."""


def urls():
    port = free_port()  # nobody listens: a well-formed URL fails to connect
    return {
        "slash unencoded": f"postgresql://plantstore:s3cr/et@127.0.0.1:{port}/plants",
        "hash unencoded": f"postgresql://plantstore:s3cr#et@127.0.0.1:{port}/plants",
        "both unencoded": f"postgresql://plantstore:{SECRET}@127.0.0.1:{port}/plants",
        "a space": f"postgresql://plantstore:s3cr et@127.0.0.1:{port}/plants",
        "an unknown option": f"postgresql://plantstore:s3cret@127.0.0.1:{port}/p?colour=red",
        "encoded, unreachable": f"postgresql://plantstore:s3cr%2Fet%23pw@127.0.0.1:{port}/p",
        "no colon, @ in it": f"postgresql://plantstore:s3cr@et@127.0.0.1:{port}/plants",
    }


def assert_no_password(output):
    for fragment in ("s3cr", "et@", "%2Fet", "et%23"):
        assert fragment not in output, output


@pytest.mark.parametrize("name", list(urls()))
def test_a_command_refusing_or_failing_on_the_url_names_it_without_its_password(
        tmp_path, name):
    result = run_plantstore("db", "check", cwd=tmp_path,
                            env={**os.environ, **plantstore_env(urls()[name])})
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1
    assert_no_password(result.stdout + result.stderr)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["both unencoded", "a space"])
def test_the_web_servers_refusal_names_the_url_without_its_password(name):
    env = {**os.environ, **plantstore_env(urls()[name]), "PORT": str(free_port()),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run([str(Path(sys.executable).with_name("plantstore")), "web"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("Error: PLANTSTORE_DATABASE_URL ") and "plantstore:***@" in line
    assert_no_password(result.stdout + result.stderr)


def test_a_percent_encoded_password_reaches_the_driver_decoded():
    database = database_from_url("postgresql://ann%40ops:s3cr%2Fet%23pw@db.internal/plants")
    assert database.connect_params["user"] == "ann@ops"
    assert database.connect_params["password"] == SECRET


@pytest.mark.parametrize("url, shown", [
    ("postgresql://u:p/w#x@h:5432/d?sslmode=require", "postgresql://u:***@h:5432/d?sslmode=require"),
    ("postgresql://u:p@w@h/d", "postgresql://u:***@h/d"),
    ("postgresql://u@h/d", "postgresql://u@h/d"),
    ("redis://:pw@cache:6379/0", "redis://:***@cache:6379/0"),
    ("sqlite:////var/lib/plantstore/plantstore.db", "sqlite:////var/lib/plantstore/plantstore.db"),
])
def test_redacted_url_hides_the_whole_password_and_nothing_else(url, shown):
    assert redacted_url(url) == shown
