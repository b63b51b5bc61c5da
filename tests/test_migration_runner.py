"""Migrations give way to the live service on PostgreSQL: a migration that
holds one table and waits for another never deadlocks with a create that
holds the second and reads the first (``plantstore/migration_runner.py``)."""
import threading

import psycopg2
import pytest

from helpers import POSTGRES_URL, wait_until
from plantstore import db
from plantstore.db import database

pytestmark = pytest.mark.skipif(
    not POSTGRES_URL, reason="PostgreSQL only: SQLite migrations take its one write lock, "
                             "with the write wait every write has")

WAITING_FOR_A_LOCK = """
SELECT count(*) FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND query LIKE %s AND pid <> pg_backend_pid()
"""


def _waits_for_a_lock(probe, statement):
    """True while another session runs ``statement`` and waits for a lock."""
    with probe.cursor() as cursor:
        cursor.execute(WAITING_FOR_A_LOCK, (f"%{statement}%",))
        return cursor.fetchone()[0] > 0


def test_a_migration_gives_way_to_a_create_instead_of_deadlocking_with_it(app):
    with database.connection_context():
        migrations = db.migration_runner()
        for _ in range(3):  # 0013, 0012, 0011
            migrations.down()
    outcome = {}

    def upgrade():
        try:
            outcome["applied"] = db.upgrade(expand=True)
        except Exception as error:  # reported by the assertion below
            outcome["error"] = error

    create = psycopg2.connect(POSTGRES_URL)  # plays a create of the release before
    probe = psycopg2.connect(POSTGRES_URL)
    probe.autocommit = True
    upgrading = threading.Thread(target=upgrade, daemon=True)
    try:
        with create.cursor() as cursor:
            cursor.execute("LOCK TABLE delivery IN ROW EXCLUSIVE MODE")  # what its insert takes
            upgrading.start()
            # 0011 has added subscription's columns (its ACCESS EXCLUSIVE lock is
            # held) and waits to put its trigger on delivery.
            wait_until(lambda: _waits_for_a_lock(probe, "CREATE TRIGGER"), timeout=30,
                       message="0011 waiting for delivery's lock")
            # What the create reads next: waits for the migration, which gives way.
            cursor.execute("SELECT count(*) FROM subscription")
            assert cursor.fetchone()[0] == 0
        create.commit()
        upgrading.join(timeout=60)
        assert not upgrading.is_alive(), "the upgrade did not finish once the create ended"
        assert "error" not in outcome, f"the upgrade failed: {outcome.get('error')!r}"
        assert outcome["applied"] == ["0011_receiver_throttle", "0012_wider_secrets"]
    finally:
        create.close()
        probe.close()
        upgrading.join(timeout=60)
        with database.connection_context():
            db.upgrade()
