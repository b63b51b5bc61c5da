"""The stored things: users and their tokens, plants, webhook subscriptions
and the outbox of deliveries with their attempts, and idempotency keys.

The schema itself is created and changed only by the numbered scripts in
``plantstore/db/migrations``; these classes describe it for queries.
"""
import datetime

from peewee import (
    AutoField,
    BigAutoField,
    BigIntegerField,
    BooleanField,
    CharField,
    DateTimeField,
    FloatField,
    ForeignKeyField,
    IntegerField,
    Model,
    TextField,
)

from . import database


def utcnow():
    """The current time in UTC, naive (how every timestamp is stored)."""
    return datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)


class BaseModel(Model):
    class Meta:
        database = database
        legacy_table_names = False


class User(BaseModel):
    """Someone who owns plants; admins see everybody's."""
    id = AutoField()
    name = CharField(max_length=100, unique=True)
    is_admin = BooleanField(default=False)
    created_at = DateTimeField(default=utcnow)


class Token(BaseModel):
    """A bearer token, kept only as the SHA-256 digest of its secret."""
    id = AutoField()
    user = ForeignKeyField(User, backref="tokens", on_delete="CASCADE")
    digest = CharField(max_length=64, unique=True)
    hint = CharField(max_length=16)  # prefix and first characters, for lists
    scopes = CharField(max_length=200)  # space-separated
    created_at = DateTimeField(default=utcnow)
    expires_at = DateTimeField(null=True)
    revoked_at = DateTimeField(null=True)


class Plant(BaseModel):
    """A plant in the store; its id is chosen by the client."""
    id = BigIntegerField(primary_key=True)
    owner = ForeignKeyField(User, backref="plants", on_delete="CASCADE")
    name = TextField()
    tag = TextField(null=True)
    created_at = DateTimeField(default=utcnow)

    class Meta:
        indexes = ((("owner", "id"), False),)


class Subscription(BaseModel):
    """A webhook receiver told about new plants.

    An operator's (``owner`` NULL, made with the CLI) hears about every
    plant; a user's (made through the API) about the plants its owner
    creates, or every plant when the owner is an admin.
    """
    id = AutoField()
    owner = ForeignKeyField(User, backref="subscriptions", null=True,
                            on_delete="CASCADE")
    url = TextField()
    # The receiver's secrets, each encrypted or plain as stored (see
    # plantstore/encryption.py); varchar without a length since migration 0012.
    bearer_token = TextField(null=True)
    secret = TextField()
    # JSON list of {"secret", "expires_at"}: rotated-out secrets that still
    # sign until their overlap ends (see webhooks/subscriptions/secrets.py); NULL: none.
    retired_secrets = TextField(null=True)
    is_active = BooleanField(default=True)
    disabled_reason = TextField(null=True)
    disabled_at = DateTimeField(null=True)
    # enabled again; NULL: since created_at. Both are the database's time:
    # how long a subscription has failed is judged by it.
    enabled_at = DateTimeField(null=True)
    last_success_at = DateTimeField(null=True)  # the last 2xx of any delivery
    created_at = DateTimeField(default=utcnow)
    # The circuit breaker (see webhooks/engine/rules.py): failures in a row, and
    # while it is open, since when and when a worker may probe next.
    failure_streak = IntegerField(default=0)
    breaker_opened_at = DateTimeField(null=True)
    breaker_probe_at = DateTimeField(null=True)
    # The throttle (see webhooks/engine/throttle.py): deliveries per second (NULL: no
    # limit), and its token bucket as of the database's time of its refill.
    rate_limit = IntegerField(null=True)
    throttle_tokens = FloatField(null=True)
    throttle_refilled_at = DateTimeField(null=True)


class Delivery(BaseModel):
    """One event for one subscription: the outbox row, written with the plant."""
    PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"

    id = BigAutoField()  # 64-bit (migration 0013)
    subscription = ForeignKeyField(Subscription, backref="deliveries",
                                   on_delete="CASCADE")
    message_id = CharField(max_length=64, unique=True)  # the webhook-id
    event_type = CharField(max_length=64)
    payload = TextField()  # the exact JSON body that is signed and sent
    status = CharField(max_length=16, default=PENDING)
    attempts = IntegerField(default=0)
    next_attempt_at = DateTimeField(default=utcnow)
    locked_until = DateTimeField(null=True)  # by the database's clock (see db/clock.py)
    lease = IntegerField(default=0)  # the fence, bumped by every claim (webhooks/engine/queue.py)
    traceparent = TextField(null=True)  # the W3C trace context of the create
    last_error = TextField(null=True)
    created_at = DateTimeField(default=utcnow)
    delivered_at = DateTimeField(null=True)

    class Meta:
        indexes = ((("subscription", "id"), False),
                   (("created_at",), False))


# What a worker's claim reads: the pending deliveries, in the order they are due.
Delivery.add_index(Delivery.index(Delivery.next_attempt_at, Delivery.id, name="delivery_due",
                                  where=Delivery.status == Delivery.PENDING))
# What a fair claim reads: a subscription's pending deliveries, in that order.
Delivery.add_index(Delivery.index(Delivery.subscription, Delivery.next_attempt_at, Delivery.id,
                                  name="delivery_due_per_subscription",
                                  where=Delivery.status == Delivery.PENDING))
# What the delivery log filtered by status reads, per subscription (migration 0017).
Delivery.add_index(Delivery.index(Delivery.subscription, Delivery.status, Delivery.id,
                                  name="delivery_subscription_status_id"))


class Attempt(BaseModel):
    """One try at sending a delivery, kept for `plantstore deliveries show`."""
    id = BigAutoField()  # 64-bit (migration 0013)
    delivery = ForeignKeyField(Delivery, backref="attempt_log",
                               on_delete="CASCADE")
    started_at = DateTimeField(default=utcnow)
    status_code = IntegerField(null=True)
    error = TextField(null=True)
    duration_ms = IntegerField()
    # The start of the receiver's answer, made storable and cut to 1,024
    # characters (webhooks/engine/receiver_text.py); NULL: no answer.
    response_body = TextField(null=True)

    @property
    def response(self):
        """What the receiver answered (status, duration, the start of the
        body), or None when it gave no HTTP answer."""
        if self.status_code is None:
            return None
        return {"status": self.status_code, "duration_ms": self.duration_ms,
                "body": self.response_body}


class IdempotencyKey(BaseModel):
    """An ``Idempotency-Key`` a user sent, with the answer it gets again.

    The row is inserted with its answer by the statement (PostgreSQL) or
    transaction (SQLite) of the effect (see ``plantstore.web.idempotency``): a
    committed row has its answer.
    The table's ``locked_until`` column is no longer read or written; it is
    kept so that hosts still running the release before stay correct during
    a rolling upgrade, and a later release's migration drops it.
    """
    id = BigAutoField()  # 64-bit (migration 0013)
    user = ForeignKeyField(User, on_delete="CASCADE")
    key = CharField(max_length=255)
    fingerprint = CharField(max_length=64)  # SHA-256 of method, path and arguments
    status = IntegerField(null=True)
    content_type = CharField(max_length=100, null=True)
    body = TextField(null=True)
    created_at = DateTimeField(default=utcnow)
    expires_at = DateTimeField(index=True)  # by the database's clock (see db/clock.py)

    class Meta:
        indexes = ((("user", "key"), True),)



class PortalLink(BaseModel):
    """A single-use link into the portal, kept only as the SHA-256 digest of
    its key (see ``plantstore/portal/links.py``)."""
    id = BigAutoField()
    digest = CharField(max_length=64, unique=True)
    user = ForeignKeyField(User, on_delete="CASCADE")
    read_only = BooleanField(default=False)
    token = ForeignKeyField(Token, null=True, on_delete="CASCADE")  # NULL: the CLI's
    created_at = DateTimeField(default=utcnow)
    expires_at = DateTimeField()  # by the database's clock, as is used_at
    used_at = DateTimeField(null=True)


class PortalSession(BaseModel):
    """A portal session, kept only as the digest of its cookie's key, with
    the CSRF token of its forms (see ``plantstore/portal/sessions.py``)."""
    id = BigAutoField()
    digest = CharField(max_length=64, unique=True)
    user = ForeignKeyField(User, on_delete="CASCADE")
    read_only = BooleanField(default=False)
    token = ForeignKeyField(Token, null=True, on_delete="CASCADE")  # NULL: the CLI's link
    csrf_token = CharField(max_length=64)
    created_at = DateTimeField(default=utcnow)  # the database's clock, as the two below
    last_seen_at = DateTimeField(default=utcnow)
    ended_at = DateTimeField(null=True)
