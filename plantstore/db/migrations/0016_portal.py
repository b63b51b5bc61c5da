"""The portal's links and sessions (docs/portal.md): new tables only, so the
release before runs on this schema unchanged.

- ``portal_link``: a single-use link a user's token (or the CLI: NULL)
  minted; only the SHA-256 digest of its key is kept; ``used_at`` is set
  by the one statement that consumes it.
- ``portal_session``: a session a link started; only the digest of its
  cookie's key is kept, with the CSRF token its forms carry. Times are the
  database's (``db/clock.py``).

The models are frozen copies, independent of ``plantstore.db.models``.
"""
import datetime

from peewee import (
    AutoField,
    BigAutoField,
    BooleanField,
    CharField,
    DateTimeField,
    ForeignKeyField,
    Model,
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

    class Token(Base):
        id = AutoField()

    class PortalLink(Base):
        id = BigAutoField()
        digest = CharField(max_length=64, unique=True)
        user = ForeignKeyField(User, on_delete="CASCADE")
        read_only = BooleanField(default=False)
        token = ForeignKeyField(Token, null=True, on_delete="CASCADE")
        created_at = DateTimeField(default=_now)
        expires_at = DateTimeField()
        used_at = DateTimeField(null=True)

    class PortalSession(Base):
        id = BigAutoField()
        digest = CharField(max_length=64, unique=True)
        user = ForeignKeyField(User, on_delete="CASCADE")
        read_only = BooleanField(default=False)
        token = ForeignKeyField(Token, null=True, on_delete="CASCADE")
        csrf_token = CharField(max_length=64)
        created_at = DateTimeField(default=_now)
        last_seen_at = DateTimeField(default=_now)
        ended_at = DateTimeField(null=True)

    return [PortalLink, PortalSession]


def up(migrator, db):
    db.create_tables(_frozen_models(db))


def down(migrator, db):
    db.drop_tables(list(reversed(_frozen_models(db))))
