"""A throttle per webhook receiver: a token bucket on its subscription row.

- ``rate_limit``: deliveries per second its receiver may be sent (NULL: no
  limit).
- ``throttle_tokens``: the deliveries it may be sent now, as of
  ``throttle_refilled_at`` (the database's time); NULL: a full bucket.
  ``webhooks/engine/throttle.py`` refills and takes them in one statement.
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

On PostgreSQL it changes one table per transaction (``atomic = False``),
each given way as the runner gives way (``db.runner.giving_way``):
``subscription``'s columns, then the functions and ``delivery``'s trigger.
Held in one transaction, the two tables' locks met the service's
transactions in a deadlock whichever was locked first: a create reads
``subscription`` before it inserts into ``delivery``, a claim updates
``delivery`` before it reads ``subscription``. Each step can run again
(``IF NOT EXISTS``; the functions and trigger come together, or not at
all), so an upgrade stopped between the two finishes on the next run.
"""
from peewee import DateTimeField, FloatField, IntegerField
from playhouse.migrate import SqliteMigrator

from plantstore.db.migrations.frozen_functions import function_text
from plantstore.db.runner import giving_way

atomic = False  # one transaction per table (see above)

TABLE = "subscription"
FUNCTIONS = ("plantstore_throttle_take_v1", "plantstore_throttle_take_for_claim_v1",
             "plantstore_throttle_give_back_v1", "plantstore_throttle_lease_v1")
ADD_COLUMNS = """
ALTER TABLE subscription ADD COLUMN IF NOT EXISTS rate_limit integer,
                         ADD COLUMN IF NOT EXISTS throttle_tokens real,
                         ADD COLUMN IF NOT EXISTS throttle_refilled_at timestamp
"""
DROP_COLUMNS = """
ALTER TABLE subscription DROP COLUMN IF EXISTS throttle_refilled_at,
                         DROP COLUMN IF EXISTS throttle_tokens,
                         DROP COLUMN IF EXISTS rate_limit
"""
LEASE_TRIGGER = """
CREATE TRIGGER plantstore_throttle_lease_v1 BEFORE INSERT ON delivery
FOR EACH ROW WHEN (NEW.locked_until IS NOT NULL)
EXECUTE FUNCTION plantstore_throttle_lease_v1()
"""


def _has_trigger(db):
    """Whether an earlier run already created the functions and the trigger."""
    return bool(db.execute_sql("SELECT count(*) FROM pg_trigger "
                               "WHERE tgname = 'plantstore_throttle_lease_v1'").fetchone()[0])


def _create_functions_and_trigger(db):
    if _has_trigger(db):
        return
    for name in FUNCTIONS:
        db.execute_sql(function_text(name))
    db.execute_sql(LEASE_TRIGGER)


def _drop_trigger_and_functions(db):
    db.execute_sql("DROP TRIGGER IF EXISTS plantstore_throttle_lease_v1 ON delivery")
    for name in reversed(FUNCTIONS):
        db.execute_sql(f"DROP FUNCTION IF EXISTS {name}")


def up(migrator, db):
    if isinstance(migrator, SqliteMigrator):
        with db.atomic():
            migrator.migrate(
                migrator.add_column(TABLE, "rate_limit", IntegerField(null=True)),
                migrator.add_column(TABLE, "throttle_tokens", FloatField(null=True)),
                migrator.add_column(TABLE, "throttle_refilled_at", DateTimeField(null=True)),
            )
        return
    giving_way(db, lambda: db.execute_sql(ADD_COLUMNS), "up 0011: subscription's columns")
    giving_way(db, lambda: _create_functions_and_trigger(db), "up 0011: delivery's trigger")


def down(migrator, db):
    if isinstance(migrator, SqliteMigrator):
        with db.atomic():
            migrator.migrate(*(migrator.drop_column(TABLE, column) for column in
                               ("throttle_refilled_at", "throttle_tokens", "rate_limit")))
        return
    giving_way(db, lambda: _drop_trigger_and_functions(db), "down 0011: delivery's trigger")
    giving_way(db, lambda: db.execute_sql(DROP_COLUMNS), "down 0011: subscription's columns")
