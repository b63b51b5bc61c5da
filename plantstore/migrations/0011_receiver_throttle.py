"""A throttle per webhook receiver: a token bucket on its subscription row.

- ``rate_limit``: deliveries per second its receiver may be sent (NULL: no
  limit).
- ``throttle_tokens``: the deliveries it may be sent now, as of
  ``throttle_refilled_at`` (the database's time); NULL: a full bucket.
  ``webhooks/throttle.py`` refills and takes them in one statement.
- PostgreSQL only: the take and the give-back as versioned PL/pgSQL
  functions (``plantstore_throttle_take_v1``, which alone refills and takes,
  ``plantstore_throttle_take_for_claim_v1``, ``plantstore_throttle_give_back_v1``),
  so their plans are kept for the session: planned afresh, the take before
  each claim cost milliseconds. None waits for a bucket another statement
  holds (``SKIP LOCKED``): that bucket gives no token this time, and no
  deadlock can form.
- PostgreSQL only: ``plantstore_throttle_lease_v1``, a trigger on each
  delivery a create inserts leased to its web process. For a throttled
  receiver it takes a token in the create's own statement (no round trip
  more), or, if there is none (or another statement holds the bucket: it
  never waits), stores the delivery unleased with ``lease`` 0, which tells
  the web process to leave it to the workers. Unthrottled receivers'
  deliveries are left as they are. (On SQLite the web process takes the
  token itself.)

Their text is read from the frozen, versioned files in
``migrations/functions/``, as 0010's is.

Every column may be NULL, so the release before (which neither reads nor
writes them) keeps working on this schema during a rolling upgrade.

Frozen like 0001: the columns are written out here.

On PostgreSQL it locks ``delivery`` before ``subscription``, the order in
which a create's ``INSERT INTO delivery ... SELECT ... FROM subscription``
takes them: holding ``subscription`` first, it waited for ``delivery``
behind creates that held ``delivery`` and waited for ``subscription``, a
deadlock (or, with the runner's ``lock_timeout``, a try that never
succeeds under load; see ``plantstore/migration_runner.py``).
"""
import os

from peewee import DateTimeField, FloatField, IntegerField
from playhouse.migrate import SqliteMigrator

TABLE = "subscription"
FUNCTIONS_DIR = os.path.join(os.path.dirname(__file__), "functions")
FUNCTIONS = ("plantstore_throttle_take_v1", "plantstore_throttle_take_for_claim_v1",
             "plantstore_throttle_give_back_v1", "plantstore_throttle_lease_v1")
LOCKS_IN_THE_SERVICE_ORDER = (
    "LOCK TABLE delivery IN SHARE ROW EXCLUSIVE MODE",  # what CREATE/DROP TRIGGER takes
    "LOCK TABLE subscription IN ACCESS EXCLUSIVE MODE",  # what ADD/DROP COLUMN takes
)
LEASE_TRIGGER = """
CREATE TRIGGER plantstore_throttle_lease_v1 BEFORE INSERT ON delivery
FOR EACH ROW WHEN (NEW.locked_until IS NOT NULL)
EXECUTE FUNCTION plantstore_throttle_lease_v1()
"""


def function_text(name):
    """The frozen ``CREATE FUNCTION`` of a versioned function."""
    with open(os.path.join(FUNCTIONS_DIR, f"{name}.sql"), encoding="utf-8") as file:
        return file.read()


def up(migrator, db):
    if not isinstance(migrator, SqliteMigrator):
        for statement in LOCKS_IN_THE_SERVICE_ORDER:
            db.execute_sql(statement)
    migrator.migrate(
        migrator.add_column(TABLE, "rate_limit", IntegerField(null=True)),
        migrator.add_column(TABLE, "throttle_tokens", FloatField(null=True)),
        migrator.add_column(TABLE, "throttle_refilled_at", DateTimeField(null=True)),
    )
    if not isinstance(migrator, SqliteMigrator):
        for name in FUNCTIONS:
            db.execute_sql(function_text(name))
        db.execute_sql(LEASE_TRIGGER)


def down(migrator, db):
    if not isinstance(migrator, SqliteMigrator):
        for statement in LOCKS_IN_THE_SERVICE_ORDER:
            db.execute_sql(statement)
        db.execute_sql("DROP TRIGGER plantstore_throttle_lease_v1 ON delivery")
        for name in reversed(FUNCTIONS):
            db.execute_sql(f"DROP FUNCTION {name}")
    migrator.migrate(*(migrator.drop_column(TABLE, column) for column in
                       ("throttle_refilled_at", "throttle_tokens", "rate_limit")))
