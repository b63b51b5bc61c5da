"""A throttle per webhook receiver: a token bucket on its subscription row.

- ``rate_limit``: deliveries per second its receiver may be sent (NULL: no
  limit).
- ``throttle_tokens``: the deliveries it may be sent now, as of
  ``throttle_refilled_at`` (the database's time); NULL: a full bucket.
  ``webhooks/throttle.py`` refills and takes them in one statement.

Every column may be NULL, so the release before (which neither reads nor
writes them) keeps working on this schema during a rolling upgrade.

Frozen like 0001: the columns are declared here, not taken from
``plantstore.models``.
"""
from peewee import DateTimeField, FloatField, IntegerField

TABLE = "subscription"


def up(migrator, db):
    migrator.migrate(
        migrator.add_column(TABLE, "rate_limit", IntegerField(null=True)),
        migrator.add_column(TABLE, "throttle_tokens", FloatField(null=True)),
        migrator.add_column(TABLE, "throttle_refilled_at", DateTimeField(null=True)),
    )


def down(migrator, db):
    migrator.migrate(*(migrator.drop_column(TABLE, column) for column in
                       ("throttle_refilled_at", "throttle_tokens", "rate_limit")))
