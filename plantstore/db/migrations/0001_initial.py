"""Users, tokens, plants, webhook subscriptions, deliveries and attempts.

The models are frozen copies, independent of ``plantstore.db.models``, so this
script creates the same schema whatever the models become later.
"""
import datetime

from peewee import (
    AutoField,
    BigIntegerField,
    BooleanField,
    CharField,
    DateTimeField,
    ForeignKeyField,
    IntegerField,
    Model,
    TextField,
)


def _now():
    return datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)


def _frozen_models(db):
    class Base(Model):
        class Meta:
            database = db
            legacy_table_names = False

    class User(Base):
        id = AutoField()
        name = CharField(max_length=100, unique=True)
        is_admin = BooleanField(default=False)
        created_at = DateTimeField(default=_now)

    class Token(Base):
        id = AutoField()
        user = ForeignKeyField(User, on_delete="CASCADE")
        digest = CharField(max_length=64, unique=True)
        hint = CharField(max_length=16)
        scopes = CharField(max_length=200)
        created_at = DateTimeField(default=_now)
        expires_at = DateTimeField(null=True)
        revoked_at = DateTimeField(null=True)

    class Plant(Base):
        id = BigIntegerField(primary_key=True)
        owner = ForeignKeyField(User, on_delete="CASCADE")
        name = TextField()
        tag = TextField(null=True)
        created_at = DateTimeField(default=_now)

        class Meta:
            indexes = ((("owner", "id"), False),)

    class Subscription(Base):
        id = AutoField()
        url = TextField()
        bearer_token = TextField(null=True)
        secret = CharField(max_length=100)
        previous_secret = CharField(max_length=100, null=True)
        previous_secret_expires_at = DateTimeField(null=True)
        is_active = BooleanField(default=True)
        disabled_reason = TextField(null=True)
        created_at = DateTimeField(default=_now)

    class Delivery(Base):
        id = AutoField()
        subscription = ForeignKeyField(Subscription, on_delete="CASCADE")
        message_id = CharField(max_length=64, unique=True)
        event_type = CharField(max_length=64)
        payload = TextField()
        status = CharField(max_length=16, default="pending")
        attempts = IntegerField(default=0)
        next_attempt_at = DateTimeField(default=_now)
        locked_until = DateTimeField(null=True)
        last_error = TextField(null=True)
        created_at = DateTimeField(default=_now)
        delivered_at = DateTimeField(null=True)

        class Meta:
            indexes = ((("status", "next_attempt_at"), False),)

    class Attempt(Base):
        id = AutoField()
        delivery = ForeignKeyField(Delivery, on_delete="CASCADE")
        started_at = DateTimeField(default=_now)
        status_code = IntegerField(null=True)
        error = TextField(null=True)
        duration_ms = IntegerField()

    return [User, Token, Plant, Subscription, Delivery, Attempt]


def up(migrator, db):
    db.create_tables(_frozen_models(db))


def down(migrator, db):
    db.drop_tables(list(reversed(_frozen_models(db))))
