"""Self-service webhooks: subscriptions owned by users, their lifecycle and
the history of rotated-out secrets.

- ``subscription.owner_id``: the user who registered it through the API;
  NULL for an operator's (CLI) subscription, which hears about every plant.
- ``subscription.retired_secrets``: a JSON list of rotated-out secrets with
  the time each stops signing (NULL: none). It replaces ``previous_secret``
  and ``previous_secret_expires_at`` (one secret), which are carried over.
- ``disabled_at``, ``enabled_at`` and ``last_success_at``: when a
  subscription stopped, when it was enabled again (NULL: never, count from
  its creation), when a delivery last got a 2xx; together they decide "no
  success for hours while failing".

The new columns may be NULL, so rows written by tools that know only the
older schema stay valid.
- Indexes for a subscription's deliveries (newest first) and for the
  retention purge (by creation time).

The fields are frozen copies, independent of ``plantstore.db.models``.
"""
import datetime
import json

from peewee import AutoField, DateTimeField, ForeignKeyField, Model, TextField


def _frozen_user(db):
    class User(Model):
        id = AutoField()

        class Meta:
            database = db
            table_name = "user"
    return User


def _carried_over_secrets(db):
    """(id, JSON) of each subscription whose previous secret still signs."""
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    cursor = db.execute_sql(
        "SELECT id, previous_secret, previous_secret_expires_at FROM subscription "
        "WHERE previous_secret IS NOT NULL AND previous_secret_expires_at IS NOT NULL")
    rows = []
    for subscription_id, secret, expires_at in cursor.fetchall():
        expires_at = DateTimeField().python_value(expires_at)
        if expires_at > now:
            rows.append((subscription_id, json.dumps(
                [{"secret": secret, "expires_at": expires_at.isoformat()}])))
    return rows


def up(migrator, db):
    carried = _carried_over_secrets(db)
    migrator.migrate(
        migrator.add_column("subscription", "owner_id", ForeignKeyField(
            _frozen_user(db), field=_frozen_user(db).id, null=True, on_delete="CASCADE")),
        migrator.add_column("subscription", "retired_secrets", TextField(null=True)),
        migrator.add_column("subscription", "disabled_at", DateTimeField(null=True)),
        migrator.add_column("subscription", "enabled_at", DateTimeField(null=True)),
        migrator.add_column("subscription", "last_success_at", DateTimeField(null=True)),
    )
    for subscription_id, secrets in carried:
        db.execute_sql("UPDATE subscription SET retired_secrets = %s WHERE id = %s"
                       .replace("%s", db.param), (secrets, subscription_id))
    migrator.migrate(
        migrator.drop_column("subscription", "previous_secret"),
        migrator.drop_column("subscription", "previous_secret_expires_at"),
        migrator.add_index("delivery", ("subscription_id", "id")),
        migrator.add_index("delivery", ("created_at",)),
    )


def down(migrator, db):
    migrator.migrate(
        migrator.drop_index("delivery", "delivery_created_at"),
        migrator.drop_index("delivery", "delivery_subscription_id_id"),
        migrator.drop_index("subscription", "subscription_owner_id"),
        migrator.add_column("subscription", "previous_secret", TextField(null=True)),
        migrator.add_column("subscription", "previous_secret_expires_at",
                            DateTimeField(null=True)),
        migrator.drop_column("subscription", "last_success_at"),
        migrator.drop_column("subscription", "enabled_at"),
        migrator.drop_column("subscription", "disabled_at"),
        migrator.drop_column("subscription", "retired_secrets"),
        migrator.drop_column("subscription", "owner_id"),
    )
