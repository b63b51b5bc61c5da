"""Delivery leases as fences with a token, the create's trace, and the
index of a fair claim.

- ``lease``: bumped by every claim; an outcome is written only under the
  token its sender holds, so a sender whose lease ran out (and was claimed
  by another) writes nothing.
- ``traceparent``: the W3C trace context of the request that queued the
  delivery, so a worker's attempt joins that trace.
- ``delivery_due_per_subscription``: the pending deliveries of one
  subscription in the order they are due; the claim reads a few per
  subscription through it, so one receiver's backlog never hides another's.

Frozen like 0001: the columns are declared here, not taken from
``plantstore.db.models``.
"""
from peewee import SQL, IntegerField, TextField
from playhouse.migrate import migrate

TABLE = "delivery"
INDEX = ("CREATE INDEX delivery_due_per_subscription ON delivery "
         "(subscription_id, next_attempt_at, id) WHERE status = 'pending'")


def up(migrator, db):
    migrate(
        migrator.add_column(TABLE, "lease",
                            IntegerField(default=0, constraints=[SQL("DEFAULT 0")])),
        migrator.add_column(TABLE, "traceparent", TextField(null=True)),
    )
    db.execute_sql(INDEX)


def down(migrator, db):
    db.execute_sql("DROP INDEX delivery_due_per_subscription")
    migrate(*(migrator.drop_column(TABLE, column) for column in ("traceparent", "lease")))
