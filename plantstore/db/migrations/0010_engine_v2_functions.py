"""The delivery engine's version-2 functions, and what they need (expand).

Added beside the release before's, which keeps running on this schema
during a rolling upgrade (it still calls ``plantstore_claim``,
``plantstore_record_outcomes``, ``plantstore_store_plant``,
``plantstore_store_keyed_plant`` and ``plantstore_idempotency_key_lock``:
none of them is changed here; a later release drops the ones no supported
release calls):

- ``attempt.response_body``: the start of each attempt's response body,
  made storable and bounded (``webhooks/engine/receiver_text.py``); null for an
  attempt with no answer and for every attempt written by the release before;
- the sequences of ``delivery``, ``attempt`` and ``idempotency_key`` as
  bigint (harmless while their columns are still int: a value past 2**31
  fails the insert either way), ready for 0013;
- ``plantstore_due_candidates_v2``, ``plantstore_claim_v2``,
  ``plantstore_record_outcomes_v2``, ``plantstore_store_plant_v2``,
  ``plantstore_store_keyed_plant_v2``: their
  ids typed bigint (cast, so they work before and after 0013), their text
  read from the frozen, versioned files in ``migrations/functions/``.

SQLite (one host, no rolling upgrade): only the column; its INTEGER ids
are 64-bit already.
"""
from peewee import TextField
from playhouse.migrate import SqliteMigrator, migrate

from plantstore.db.migrations.frozen_functions import function_text

FUNCTIONS = ("plantstore_due_candidates_v2", "plantstore_claim_v2",
             "plantstore_record_outcomes_v2",
             "plantstore_store_plant_v2", "plantstore_store_keyed_plant_v2")
SEQUENCES = ("delivery_id_seq", "attempt_id_seq", "idempotency_key_id_seq")


def up(migrator, db):
    migrate(migrator.add_column("attempt", "response_body", TextField(null=True)))
    if isinstance(migrator, SqliteMigrator):
        return
    for sequence in SEQUENCES:
        db.execute_sql(f"ALTER SEQUENCE {sequence} AS bigint")
    for name in FUNCTIONS:
        db.execute_sql(function_text(name))


def down(migrator, db):
    if not isinstance(migrator, SqliteMigrator):
        for name in reversed(FUNCTIONS):
            db.execute_sql(f"DROP FUNCTION {name}")
        for sequence in SEQUENCES:
            db.execute_sql(f"ALTER SEQUENCE {sequence} AS integer")
    migrate(migrator.drop_column("attempt", "response_body"))
