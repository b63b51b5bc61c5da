"""The event a job delivers: ``event_type`` appended to the ``plantstore_job``
view (migration 0014), so senders read it from every job row.

The whole change a field senders need takes: this view, ``Job``'s field,
and where it is used (the attempt's span). The v3 functions return the
view's row type, so they return the new column as they are. Appending a
column keeps every reader by name working, the release before included.

Frozen like 0001: the view's columns are written out here.
"""
from playhouse.migrate import SqliteMigrator

from plantstore.db.migrations.frozen_functions import function_text

COLUMNS = """
SELECT d.id AS delivery_id, d.message_id, d.payload, d.attempts, d.lease, d.traceparent,
       s.id AS subscription_id, s.owner_id, s.url, s.bearer_token, s.secret,
       s.retired_secrets, s.breaker_opened_at IS NOT NULL AS breaker_open{extra}
FROM delivery d JOIN subscription s ON s.id = d.subscription_id
"""


RETURNING_JOBS = ("plantstore_store_plant_v3", "plantstore_store_keyed_plant_v3",
                  "plantstore_claim_v3")
"""The functions of 0014 whose rows are the view's."""


def _view(migrator, db, extra):
    if isinstance(migrator, SqliteMigrator):  # SQLite cannot replace a view
        db.execute_sql("DROP VIEW plantstore_job")
        db.execute_sql("CREATE VIEW plantstore_job AS" + COLUMNS.format(extra=extra))
    else:
        db.execute_sql("CREATE OR REPLACE VIEW plantstore_job AS" + COLUMNS.format(extra=extra))


def up(migrator, db):
    _view(migrator, db, ", d.event_type")


def down(migrator, db):
    if isinstance(migrator, SqliteMigrator):
        _view(migrator, db, "")
    else:  # a view's column cannot be dropped by replacing it: made again, with its functions
        for name in reversed(RETURNING_JOBS):
            db.execute_sql(f"DROP FUNCTION {name}")
        db.execute_sql("DROP VIEW plantstore_job")
        db.execute_sql("CREATE VIEW plantstore_job AS" + COLUMNS.format(extra=""))
        for name in RETURNING_JOBS:
            db.execute_sql(function_text(name))
