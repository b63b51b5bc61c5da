"""`plantstore db upgrade` an operator can run blind: two at once take turns
and the second says whom it waited for; a migration kept from its locks
says what holds them at most every few seconds, and its last line names
the migration, the table, the session holding it and what to do. On real
PostgreSQL, with a second connection holding a lock in the test's database."""
import fcntl
import os
import re
import subprocess
import tempfile
import time

import psycopg2
import pytest

from helpers import PLANTSTORE, POSTGRES_URL, plantstore_env, wait_until
from plantstore import db
from plantstore.db import database
from plantstore.db import runner as migration_runner

postgres_only = pytest.mark.skipif(not POSTGRES_URL, reason="PostgreSQL's locks and sessions")
sqlite_only = pytest.mark.skipif(bool(POSTGRES_URL), reason="SQLite's database file")


@pytest.fixture
def undo(app):
    """``undo(name)`` takes back every migration from the last through
    ``name``; the names taken back, in order. Every migration is applied
    again afterwards."""
    def take_back(name):
        with database.connection_context():
            return sorted(db.migration_runner().down(name))
    yield take_back
    db.upgrade()


class Upgrade:
    """A `plantstore db upgrade` process, what it prints read while it runs."""

    def __init__(self, database_url):
        self.stdout, self.stderr = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        self.began = time.monotonic()
        self.process = subprocess.Popen([str(PLANTSTORE), "db", "upgrade"],
                                        env={**os.environ, **plantstore_env(database_url)},
                                        stdout=self.stdout, stderr=self.stderr)

    def said(self):
        """Its stderr so far."""
        return os.pread(self.stderr.fileno(), 1 << 20, 0).decode()

    def wait_for(self, text, timeout=60):
        """Wait until it has said ``text`` on stderr (failing if it ends first)."""
        def said_it():
            if text in self.said():
                return True
            assert self.process.poll() is None, f"it ended first: {self.said()}"
            return False
        wait_until(said_it, timeout, interval=0.05, message=lambda: f"{text!r} in {self.said()}")

    def finish(self, timeout=120):
        """Its exit status, stdout and stderr once it ended; the seconds it ran."""
        status = self.process.wait(timeout=timeout)
        printed = os.pread(self.stdout.fileno(), 1 << 20, 0).decode()
        return status, printed, self.said(), time.monotonic() - self.began

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)


@pytest.fixture
def upgrades():
    """Start ``Upgrade`` processes (``upgrades(database_url)``); any still
    running is killed afterwards."""
    started = []

    def start(database_url):
        started.append(Upgrade(database_url))
        return started[-1]
    yield start
    for upgrade in started:
        upgrade.kill()


@postgres_only
def test_two_upgrades_at_once_take_turns_and_the_second_says_whom_it_waited_for(
        undo, upgrades, database_url):
    undo("0013_bigint_ids")  # it rewrites delivery
    holder = psycopg2.connect(POSTGRES_URL)
    try:
        with holder.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM delivery")  # held until the rollback
        first = upgrades(database_url)
        first.wait_for("0013_bigint_ids waits for a lock on table delivery")
        second = upgrades(database_url)
        second.wait_for("waiting for another `plantstore db upgrade`")
        holder.rollback()
    finally:
        holder.close()

    status, printed, said, seconds = first.finish()
    assert status == 0 and printed.startswith("applied 0013_bigint_ids"), (printed, said)
    progress = said.splitlines()
    assert all(line.startswith("0013_bigint_ids waits for a lock on table delivery, held by "
                               "PostgreSQL session pid") for line in progress), said
    assert len(progress) <= seconds / migration_runner.PROGRESS_SECONDS + 1, said
    status, printed, said, seconds = second.finish()
    assert (status, printed) == (0, "up to date\n"), said
    waiting = said.splitlines()
    assert len(waiting) <= seconds / migration_runner.PROGRESS_SECONDS + 2, said
    assert re.fullmatch(r"waited \d+ s for another `plantstore db upgrade` \(PostgreSQL "
                        rf"session pid \d+, plantstore db upgrade {first.process.pid}@\S+, "
                        r"from [^,]+, connected [-\d: ]+ UTC\) to end", waiting[-1]), said


@sqlite_only
def test_on_sqlite_an_upgrade_waits_for_the_one_holding_the_database_file(
        undo, upgrades, database_url):
    pending = undo("0013_bigint_ids")
    path = database_url.removeprefix("sqlite:///")
    with open(f"{path}-upgrade", "a+") as held:  # as an upgrade of this file holds it
        fcntl.flock(held, fcntl.LOCK_EX)
        held.truncate(0)
        held.write("pid 4242 on elsewhere")
        held.flush()
        waiting = upgrades(database_url)
        waiting.wait_for("waiting for another `plantstore db upgrade` (pid 4242 on elsewhere) "
                         "to end")
    status, printed, said, _ = waiting.finish()
    assert (status, printed.splitlines()) == (0, [f"applied {name}" for name in pending]), said
    assert re.fullmatch(r"waited \d+ s for another `plantstore db upgrade` \(pid 4242 on "
                        r"elsewhere\) to end", said.splitlines()[-1]), said


@postgres_only
def test_a_blocked_migration_says_what_holds_it_every_few_seconds_then_what_to_do(
        undo, runner, monkeypatch):
    pending = undo("0012_wider_secrets")  # it alters subscription
    monkeypatch.setattr(migration_runner, "TRY_FOR_SECONDS", 4)
    monkeypatch.setattr(migration_runner, "PROGRESS_SECONDS", 1)
    holder = psycopg2.connect(POSTGRES_URL, application_name="a report")
    try:
        with holder.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM subscription")  # held until closed
        began = time.monotonic()
        result = runner.invoke(args=["db", "upgrade"])
        seconds = time.monotonic() - began
        pid = holder.get_backend_pid()
    finally:
        holder.close()

    assert result.exit_code == 1 and result.stdout == "", result.output
    *progress, last = result.stderr.splitlines()
    blocker = (rf"table subscription, held by PostgreSQL session pid {pid} \(idle in "
               r"transaction, from [^;]+, application a report; its transaction began "
               r"[-\d: ]+ UTC, its query [-\d: ]+ UTC: 'SELECT count\(\*\) FROM subscription'\)")
    assert 2 <= len(progress) <= seconds / 1 + 1, result.stderr
    for line in progress:
        assert re.fullmatch(rf"0012_wider_secrets waits for a lock on {blocker}; giving way "
                            "to the service and trying again", line), line
    assert re.fullmatch(rf"Error: 0012_wider_secrets gave up waiting for a lock on {blocker}: "
                        rf"end that session \(SELECT pg_terminate_backend\({pid}\)\) or let it "
                        r"finish, then run `plantstore db upgrade` again", last), last

    again = runner.invoke(args=["db", "upgrade"])  # the session ended: nothing holds it now
    assert again.exit_code == 0, again.output
    assert [line.split(" (")[0] for line in again.stdout.splitlines()] == [
        f"applied {name}" for name in pending]


UPGRADE_SESSIONS = """
SELECT pid, state, xact_start, query_start, state_change, backend_xmin IS NOT NULL, query
FROM pg_stat_activity
WHERE application_name LIKE %s AND pid NOT IN (SELECT pid FROM pg_locks WHERE NOT granted)
"""
"""The sessions of one upgrade other than the migration's (the one waiting)."""


@postgres_only
def test_an_index_built_concurrently_waits_for_the_services_transactions_never_the_upgrades_own(
        undo, upgrades, database_url):
    """``CREATE INDEX CONCURRENTLY`` waits for every transaction that held a
    snapshot when it began: the upgrade's lock and its watch must hold none,
    or the build waits for the upgrade that runs it, for ever."""
    undo("0017_delivery_log_index")  # built CONCURRENTLY
    service = psycopg2.connect(POSTGRES_URL, application_name="a report")
    observer = psycopg2.connect(POSTGRES_URL)
    observer.autocommit = True  # each look a transaction of its own, holding back nothing
    try:
        service.set_session(isolation_level="REPEATABLE READ")
        with service.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM plant")  # its snapshot held until the rollback
        upgrade = upgrades(database_url)
        upgrade.wait_for("0017_delivery_log_index waits for an older transaction to end, in "
                         f"PostgreSQL session pid {service.get_backend_pid()} (idle in "
                         "transaction, from ")
        samples = []

        def looked_three_times():
            with observer.cursor() as cursor:
                cursor.execute(UPGRADE_SESSIONS,
                               (f"plantstore db upgrade {upgrade.process.pid}@%",))
                samples.extend(cursor.fetchall())
            return len({state_change for _, state, _, _, state_change, _, _ in samples
                        if state != "idle in transaction"}) >= 3
        wait_until(looked_three_times, timeout=60, interval=0.02,
                   message="the upgrade's watch to look three times")
        service.rollback()
    finally:
        service.close()
        observer.close()

    holding = [sample for sample in samples if sample[1] == "idle in transaction"]
    assert {(pid, query) for pid, *_, query in holding} == {
        (holding[0][0], "SELECT pg_try_advisory_xact_lock(1886154356, 1)")}, samples
    assert {state_change for *_, state_change, _, _ in holding} == {holding[0][4]}, (
        "the lock's transaction ran a statement after it took the lock", samples)
    assert not any(has_snapshot for *_, has_snapshot, _ in holding), samples
    statements_per_transaction = {}
    for pid, _, xact_start, query_start, *_ in samples:
        if xact_start is not None:
            statements_per_transaction.setdefault((pid, xact_start), set()).add(query_start)
    assert all(len(starts) == 1 for starts in statements_per_transaction.values()), (
        "a session of the upgrade kept a transaction across statements", samples)
    status, printed, said, _ = upgrade.finish(timeout=60)
    assert (status, printed.splitlines()) == (
        0, ["applied 0017_delivery_log_index", "applied 0018_due_rule"]), said
