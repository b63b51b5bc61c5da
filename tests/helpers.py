"""Plain helpers the test modules call: requests as a user, the contract's
error shape, plants made and listed, paging, waiting, and the installed
``plantstore`` command.

Fixtures live in ``conftest.py`` and in the plugins under ``plugins/``.
"""
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urljoin

import libfaketime
import pytest
import requests

from plantstore import db
from plantstore.db.models import Plant, User
from plantstore.settings import SETTINGS

REPO = Path(__file__).resolve().parents[1]
POSTGRES_URL = os.environ.get("PLANTSTORE_TEST_DATABASE_URL")
"""The PostgreSQL the suite runs on, or None for SQLite (see conftest.py)."""
PLANTSTORE = Path(sys.executable).with_name("plantstore")
LINK_NEXT = re.compile(r'<([^>]*)>; rel="next"')


# --- requests -------------------------------------------------------------

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


def headers_but_request_id(response):
    """The response's headers but the per-request id, to compare two answers."""
    return tuple(sorted((name, value) for name, value in response.headers.items()
                        if name.lower() != "x-request-id"))


# --- plants ---------------------------------------------------------------

def post_plant(client, token, body):
    """POST ``body`` as JSON to /plants with ``token``; the response, unchecked."""
    return client.post("/plants", json=body, headers=bearer(token))


def create_plant(client, token, plant_id, name="fern", **fields):
    """Create plant ``plant_id`` as ``token``'s holder; fails unless answered 200."""
    response = post_plant(client, token, {"id": plant_id, "name": name, **fields})
    assert response.status_code == 200, response.get_json()
    return response


def listed(client, token, query=""):
    """What GET /plants answers ``token``'s holder (status checked)."""
    response = client.get("/plants" + query, headers=bearer(token))
    assert response.status_code == 200, response.data
    return response.get_json()


def seed(owner, ids, tag=None):
    """Store plants of the user ``owner`` straight in the database (fast),
    each named after its id."""
    with db.database.atomic():
        owner_id = User.get(User.name == owner).id
        Plant.insert_many([{"id": i, "owner": owner_id, "name": f"plant {i}", "tag": tag}
                           for i in ids]).execute()


# --- paging ---------------------------------------------------------------

def next_url(response):
    """The absolute URL of the response's rel="next" link, or None."""
    link = response.headers.get("Link")
    if link is None:
        return None
    match = LINK_NEXT.fullmatch(link)
    assert match, f"not an RFC 8288 next link: {link!r}"
    return urljoin(response.request.url, match.group(1))


def walk_pages(client, url, headers, most_pages=50, timeout=30):
    """The JSON body of every page from ``url`` on, following rel="next" links.

    ``client`` is the app's test client, or a ``requests.Session`` and an
    absolute ``url`` of a real server (each request then times out after
    ``timeout`` seconds). Fails after ``most_pages`` pages.
    """
    served = isinstance(client, requests.Session)
    pages = []
    while url is not None:
        assert len(pages) < most_pages, "the next links never end"
        if served:
            response = client.get(url, headers=headers, timeout=timeout)
            body = response.json() if response.status_code == 200 else response.text
        else:
            response = client.get(url, headers=headers)
            body = response.get_json() if response.status_code == 200 else response.data
        assert response.status_code == 200, body
        assert isinstance(body, list), body
        pages.append(body)
        url = next_url(response)
    return pages


# --- waiting --------------------------------------------------------------

def wait_until(predicate, timeout=10.0, interval=0.02, message="the condition"):
    """Call ``predicate`` until it returns something true, and return that.

    Fails (AssertionError) once ``timeout`` seconds of wall-clock time have
    passed; ``message`` (a string, or a function making one) says what was
    waited for.
    """
    deadline = time.monotonic() + timeout
    while True:
        outcome = predicate()
        if outcome:
            return outcome
        if time.monotonic() >= deadline:
            said = message() if callable(message) else message
            raise AssertionError(f"{said} (waited {timeout}s)")
        time.sleep(interval)


# --- processes ------------------------------------------------------------

def free_port():
    """A TCP port on loopback nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ProcessOutput:
    """A file that processes write their output to, read while they write.

    The writers share one open file (``file``: pass it as ``stdout`` or
    ``stderr``) opened for appending, so each write lands at the end, whatever
    the others do. ``read`` opens the file afresh: seeking in the writers' own
    file object would move the offset they share, and a write landing
    meanwhile would overwrite earlier lines.
    """

    def __init__(self):
        self._directory = tempfile.TemporaryDirectory(prefix="plantstore-output-")
        self.path = Path(self._directory.name, "output")
        self.file = open(self.path, "ab")

    def read(self):
        """Everything written so far, as text."""
        return self.path.read_bytes().decode(errors="replace")


@contextlib.contextmanager
def process_group_killed_after(process):
    """Run the block; then, if ``process`` (started in a session of its own)
    still runs, as after a failed assertion, SIGKILL its whole group."""
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def plantstore_env(database_url, **settings):
    """The variables that put a plantstore process on ``database_url`` with
    ``settings`` (``WEBHOOK_READ_TIMEOUT=5`` → ``PLANTSTORE_WEBHOOK_READ_TIMEOUT``)."""
    return {"PLANTSTORE_DATABASE_URL": database_url,
            **{f"PLANTSTORE_{key}": str(value) for key, value in settings.items()}}


def system_program_missing(reason):
    """Skip the test, ``reason`` naming the missing optional system program
    and its Debian package (README.md lists them); under CI, which installs
    them all (``.ci/run``), fail instead."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}: required under CI")
    pytest.skip(reason)


def wall_clock_off(offset):
    """The variables that run a process with its wall clock ``offset`` off
    (libfaketime's form: ``+120s``, ``-6h``) and its monotonic clock true, as
    on a host whose clock is wrong: the library the ``libfaketime`` package
    ships (a test extra), preloaded; no system ``faketime`` needed. A faked
    monotonic clock would stall Python's timed waits, which it does not
    intercept."""
    _, preload = libfaketime.get_reload_information()
    return {**preload, "DONT_FAKE_MONOTONIC": "1", "FAKETIME": offset}


def run_plantstore(*args, env, cwd=REPO, timeout=60):
    """Run the installed ``plantstore`` command with exactly ``env``; the
    finished process, its output as text."""
    return subprocess.run([str(PLANTSTORE), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def setting(key):
    """The ``plantstore.settings.Setting`` called ``key``."""
    return next(entry for entry in SETTINGS if entry.key == key)


# --- clocks ---------------------------------------------------------------

def skew_process_clock(monkeypatch, offset):
    """Make this process's clock read ``offset`` (a timedelta) off, like a
    host whose clock is wrong: every plantstore module's name for it
    (``models.utcnow``, ``clock.local_now``) until the test ends."""
    from plantstore.db import clock, models
    real_clocks = (models.utcnow, clock.local_now)
    real = models.utcnow

    def skewed():
        return real() + offset
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("plantstore"):
            for name in ("utcnow", "local_now"):
                if getattr(module, name, None) in real_clocks:
                    monkeypatch.setattr(module, name, skewed)


def roll_back_after(name):
    """Undo every applied migration newer than ``name``, the newest first."""
    migrations = db.migration_runner()
    for _ in [migration for migration in migrations.status()
              if migration.applied and migration.name > name]:
        migrations.down()
