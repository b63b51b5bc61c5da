"""The due rule written once on PostgreSQL: two inlinable SQL functions, and
the engine's functions that call them (expand).

- ``plantstore_delivery_due_v1`` (a delivery is pending, its time has come,
  no sender holds it) and ``plantstore_subscription_due_v1`` (active, its
  breaker closed or its probe due): one SQL expression each, over scalar
  arguments, so the planner inlines them and the statements calling them
  still read through ``delivery_due_per_subscription``;
- ``plantstore_due_candidates_v3``, ``plantstore_claim_v4`` and
  ``plantstore_throttle_take_for_claim_v2``: ``_v2``, ``_v3`` and ``_v1``
  with the rule called instead of written out; the store
  (``webhooks/engine/store/postgres.sql``) calls these, and its
  ``oldest_due_age`` the two rules.

Their text is read from the frozen, versioned files in
``migrations/functions/``, as 0010's is. Added beside what the release
before calls: ``plantstore_due_candidates_v2``, ``plantstore_claim_v3``
and ``plantstore_throttle_take_for_claim_v1`` stay, unchanged, so it keeps
running on this schema during a rolling upgrade; a later release drops
them, once no supported release calls them.

SQLite (one host, no rolling upgrade): nothing; its rule is written once
in ``webhooks/engine/store/sqlite.sql``.
"""
from playhouse.migrate import SqliteMigrator

from plantstore.db.migrations.frozen_functions import function_text

FUNCTIONS = ("plantstore_delivery_due_v1", "plantstore_subscription_due_v1",
             "plantstore_due_candidates_v3", "plantstore_claim_v4",
             "plantstore_throttle_take_for_claim_v2")
"""In the order they are created (the rules first: a SQL function's body is
checked when it is created; PL/pgSQL's only when called)."""


def up(migrator, db):
    if isinstance(migrator, SqliteMigrator):
        return
    for name in FUNCTIONS:
        db.execute_sql(function_text(name))


def down(migrator, db):
    if isinstance(migrator, SqliteMigrator):
        return
    for name in reversed(FUNCTIONS):
        db.execute_sql(f"DROP FUNCTION {name}")
