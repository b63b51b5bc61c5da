"""The per-subscription circuit breaker: failures in a row, opened at, next probe.

Frozen like 0001: the columns are declared here, not taken from
``plantstore.db.models``.
"""
from peewee import SQL, DateTimeField, IntegerField
from playhouse.migrate import migrate

TABLE = "subscription"


def up(migrator, db):
    migrate(
        # A database default too, so rows written by any means start at 0.
        migrator.add_column(TABLE, "failure_streak",
                            IntegerField(default=0, constraints=[SQL("DEFAULT 0")])),
        migrator.add_column(TABLE, "breaker_opened_at", DateTimeField(null=True)),
        migrator.add_column(TABLE, "breaker_probe_at", DateTimeField(null=True)),
    )


def down(migrator, db):
    migrate(*(migrator.drop_column(TABLE, column)
              for column in ("breaker_probe_at", "breaker_opened_at", "failure_streak")))
