"""Idempotency keys of creates: the key, the request's fingerprint, the answer.

The models are frozen copies, independent of ``plantstore.db.models``.
"""
import datetime

from peewee import (
    AutoField,
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

    class IdempotencyKey(Base):
        id = AutoField()
        user = ForeignKeyField(User, on_delete="CASCADE")
        key = CharField(max_length=255)
        fingerprint = CharField(max_length=64)
        status = IntegerField(null=True)
        content_type = CharField(max_length=100, null=True)
        body = TextField(null=True)
        locked_until = DateTimeField(null=True)
        created_at = DateTimeField(default=_now)
        expires_at = DateTimeField(index=True)

        class Meta:
            indexes = ((("user", "key"), True),)

    return [IdempotencyKey]


def up(migrator, db):
    db.create_tables(_frozen_models(db))


def down(migrator, db):
    db.drop_tables(_frozen_models(db))
