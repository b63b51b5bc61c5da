"""Migrations give way to the live service on PostgreSQL
(``plantstore/db/runner.py``): one never deadlocks with a
transaction that holds one of its tables and asks for another, and under
steady streams of creates and claims an expand upgrade still finishes,
with every one of them served."""
import itertools
import threading

import psycopg2
import pytest

from helpers import POSTGRES_URL, roll_back_after, wait_until
from plantstore import db
from plantstore.db import database
from plantstore.db.models import Subscription
from plantstore.db.runner import lock_timeouts_ms

postgres_only = pytest.mark.skipif(
    not POSTGRES_URL, reason="PostgreSQL only: SQLite migrations take its one write lock, "
                             "with the write wait every write has")

EXPANDED_FROM_0010 = ["0011_receiver_throttle", "0012_wider_secrets"]

# What the service's statements do to the tables 0011 changes: a create
# reads the subscriptions that hear about its plant, then inserts their
# deliveries (its statement's CTEs lock ``subscription`` first); a claim
# updates deliveries, reading their subscriptions (``delivery`` first).
CREATE_S_INSERT = """
WITH s AS (SELECT id FROM subscription WHERE id = %(subscription_id)s)
INSERT INTO delivery (subscription_id, message_id, event_type, payload, status, attempts,
                      lease, next_attempt_at, created_at)
SELECT s.id, %(message_id)s, 'plant.created', '{}', 'pending', 0, 1, now(), now() FROM s
"""
CLAIM_S_UPDATE = """
UPDATE delivery d SET lease = d.lease + 1
FROM subscription s
WHERE s.id = d.subscription_id AND s.id = %(subscription_id)s
  AND d.message_id = %(message_id)s
"""


@pytest.fixture
def at_0010(app):
    """The schema as the release before 0011 left it (with one subscription);
    fully migrated again afterwards."""
    with database.connection_context():
        subscription = Subscription.create(url="http://127.0.0.1:9/", secret="whsec_" + "A" * 44)
        roll_back_after("0010_engine_v2_functions")
    yield subscription.id
    with database.connection_context():
        db.upgrade()


class Upgrade(threading.Thread):
    """``plantstore db upgrade --expand`` in a thread of its own."""

    def __init__(self):
        super().__init__(daemon=True)
        self.applied, self.error = None, None

    def run(self):
        try:
            self.applied = [name for name, _ in db.upgrade(expand=True).applied]
        except Exception as error:  # reported by the test that reads it
            self.error = error

    def finished(self, timeout):
        self.join(timeout)
        assert not self.is_alive(), "the upgrade did not finish"
        assert self.error is None, f"the upgrade failed: {self.error!r}"
        return self.applied


def _waits_for_a_lock(probe, other_than):
    """True while a session other than ``other_than`` (pids) waits for a lock."""
    with probe.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                       "AND datname = current_database() AND pid <> ALL(%s)",
                       (list(other_than),))
        return cursor.fetchone()[0] > 0


# Parties that hold one of 0011's tables and then ask for the other.
PARTIES = {
    "create": ("SELECT count(*) FROM subscription",
               "LOCK TABLE delivery IN ROW EXCLUSIVE MODE"),  # what its insert takes
    "claim": ("LOCK TABLE delivery IN ROW EXCLUSIVE MODE",  # what its update takes
              "SELECT count(*) FROM subscription"),
    "outcome batch": ("SELECT id FROM subscription ORDER BY id FOR UPDATE",
                      "UPDATE delivery SET attempts = attempts WHERE false"),
}


@postgres_only
@pytest.mark.parametrize("party", PARTIES)
def test_a_migration_never_deadlocks_with_a_transaction_that_holds_one_of_its_tables(
        at_0010, party):
    first, then = PARTIES[party]
    holder = psycopg2.connect(POSTGRES_URL)
    probe = psycopg2.connect(POSTGRES_URL)
    probe.autocommit = True
    upgrade = Upgrade()
    try:
        with holder.cursor() as cursor:
            cursor.execute(first)
            upgrade.start()
            wait_until(lambda: _waits_for_a_lock(probe, {holder.get_backend_pid(),
                                                         probe.get_backend_pid()}),
                       timeout=30, message="the migration waiting for a lock")
            cursor.execute(then)  # waits for the migration at most while it tries
        holder.commit()
        assert upgrade.finished(timeout=60) == EXPANDED_FROM_0010
    finally:
        holder.close()
        probe.close()
        upgrade.join(timeout=60)


class Statements(threading.Thread):
    """One statement after another, each in a transaction of its own on a
    connection of its own that ends a few milliseconds after it (as a
    request that does more after it does), until stopped."""

    def __init__(self, statement, subscription_id, name):
        super().__init__(daemon=True)
        self.statement, self.subscription_id, self.name = statement, subscription_id, name
        self.done, self.errors, self.stopping = 0, [], threading.Event()

    def run(self):
        connection = psycopg2.connect(POSTGRES_URL)
        try:
            while not self.stopping.is_set():
                try:
                    with connection, connection.cursor() as cursor:
                        cursor.execute(self.statement, {
                            "subscription_id": self.subscription_id,
                            "message_id": f"msg_{self.name}_{self.done}"})
                        cursor.execute("SELECT pg_sleep(0.005)")
                    self.done += 1
                except psycopg2.Error as error:
                    self.errors.append(f"{error.pgcode}: {error}")
        finally:
            connection.close()


@postgres_only
def test_an_expand_upgrade_finishes_under_streams_of_creates_and_claims_and_fails_none(
        at_0010):
    streams = [Statements(statement, at_0010, f"{kind}{n}") for n in range(2)
               for kind, statement in (("create", CREATE_S_INSERT), ("claim", CLAIM_S_UPDATE))]
    upgrade = Upgrade()
    for stream in streams:
        stream.start()
    try:
        wait_until(lambda: all(stream.done >= 5 for stream in streams), timeout=30,
                   message="every stream under way")
        served_before = sum(stream.done for stream in streams)
        upgrade.start()
        applied = upgrade.finished(timeout=60)
        served_during = sum(stream.done for stream in streams) - served_before
    finally:
        for stream in streams:
            stream.stopping.set()
        for stream in streams:
            stream.join(timeout=30)
        upgrade.join(timeout=60)
    assert applied == EXPANDED_FROM_0010
    assert [error for stream in streams for error in stream.errors] == []
    assert served_during > 0, "nothing was served while the upgrade ran"


def test_each_try_waits_half_as_long_again_up_to_half_the_deadlock_timeout():
    assert list(itertools.islice(lock_timeouts_ms(1000), 6)) == [200, 300, 450, 500, 500, 500]
    assert list(itertools.islice(lock_timeouts_ms(100), 2)) == [50, 50]
