"""Job rows by name: the ``plantstore_job`` view, and functions returning it.

- ``plantstore_job`` (both backends): a leased delivery as a sender holds
  it, one row per delivery with its subscription's sending settings. It is
  the one place a job's columns are listed in SQL: the stores read jobs
  from it (``jobs_of``), and the new functions return its row type, so a
  field senders need is a column added to its table, to this view (by a
  later migration, ``CREATE OR REPLACE VIEW`` with the column appended; on
  SQLite the view is dropped and made again) and to ``Job``.
- PostgreSQL only: ``plantstore_audience_v1`` (who hears about a new plant,
  written once), ``plantstore_enqueue_new_plant_v1`` (a new plant's
  deliveries, for both creates), ``plantstore_store_plant_v3``,
  ``plantstore_store_keyed_plant_v3`` and ``plantstore_claim_v3``, which
  return ``SETOF plantstore_job``, and ``plantstore_record_outcomes_v3``,
  which locks the subscriptions it moves before any delivery row; their
  text is read from the frozen, versioned files in ``migrations/functions/``,
  as 0010's is.

Added beside what the release before calls (the v2 functions are kept),
so it keeps running on this schema during a rolling upgrade.

Frozen like 0001: the view's columns are written out here.
"""
from playhouse.migrate import SqliteMigrator

from plantstore.db.migrations.frozen_functions import function_text

JOB_VIEW = """
CREATE VIEW plantstore_job AS
SELECT d.id AS delivery_id, d.message_id, d.payload, d.attempts, d.lease, d.traceparent,
       s.id AS subscription_id, s.owner_id, s.url, s.bearer_token, s.secret,
       s.retired_secrets, s.breaker_opened_at IS NOT NULL AS breaker_open
FROM delivery d JOIN subscription s ON s.id = d.subscription_id
"""
FUNCTIONS = ("plantstore_audience_v1", "plantstore_enqueue_new_plant_v1",
             "plantstore_store_plant_v3",
             "plantstore_store_keyed_plant_v3", "plantstore_claim_v3",
             "plantstore_record_outcomes_v3")


def up(migrator, db):
    db.execute_sql(JOB_VIEW)
    if isinstance(migrator, SqliteMigrator):
        return
    for name in FUNCTIONS:
        db.execute_sql(function_text(name))


def down(migrator, db):
    if not isinstance(migrator, SqliteMigrator):
        for name in reversed(FUNCTIONS):
            db.execute_sql(f"DROP FUNCTION {name}")
    db.execute_sql("DROP VIEW plantstore_job")
