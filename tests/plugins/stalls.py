"""A PostgreSQL that stalls a create inside its statement, for the tests of
what holds a key and what bounds a request while the database stalls."""
import psycopg2
import pytest

from helpers import POSTGRES_URL
from plantstore import db
from plantstore.db.models import Subscription, utcnow


@pytest.fixture
def stalled_writes(app):
    """PostgreSQL: make a create stall inside its statement, after it has
    claimed its key. An operator's subscription (breaker open, so nobody
    sends) hears about every plant; while another transaction holds its row
    ``FOR UPDATE``, a create's delivery waits on its foreign key, with the
    key's row inserted and its lock held. Returns ``release()``; released
    at the end of the test whatever happened."""
    with app.app_context():
        subscription = Subscription.create(
            url="http://127.0.0.1:9/hook", secret="whsec_" + "A" * 44,
            breaker_opened_at=utcnow(), breaker_probe_at=utcnow())
    holder = psycopg2.connect(POSTGRES_URL)
    with holder.cursor() as cursor:  # a transaction stays open until rollback
        cursor.execute("SELECT 1 FROM subscription WHERE id = %s FOR UPDATE",
                       (subscription.id,))

    def release():
        if not holder.closed:
            holder.rollback()
            holder.close()
    yield release
    release()


def waiting_on_a_lock(app):
    """How many statements on the test's database wait for a lock."""
    with app.app_context():
        return db.database.execute_sql(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database() AND pid <> pg_backend_pid()").fetchone()[0]
