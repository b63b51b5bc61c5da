"""The subscription store: every write of a subscription's own row (its URL,
bearer token, rate limit and secrets), from the API, the CLI, a rotation,
the housekeeping and a re-encryption alike. Values are sealed here, where
they are stored (``encryption.seal``). What the engine writes on the same
row (its breaker, its throttle's bucket, disabling and deleting it) goes
through the delivery store (``engine/store``), which keeps the one lock
order of docs/webhooks-isolation.md.

One implementation serves both backends: these are single-row statements
peewee writes alike on each.
"""
from ...db import clock, database, for_update
from ...db.models import Subscription, User
from ...encryption import seal
from ..engine import throttle
from ..receivers.secrets import new_secret

UNCHANGED = object()
"""A field ``change`` leaves as it is."""


class TooManySubscriptions(Exception):
    """The owner already holds the most subscriptions allowed."""

    def __init__(self, held):
        super().__init__(held)
        self.held = held


def add(owner_id, url, bearer, rate_limit, most=None):
    """A new subscription of ``owner_id`` (None: the operator's, hearing about
    every plant) and the signing secret minted for it, in plain text (shown
    once). With ``most``, one add at a time per owner (its user row locked),
    and ``TooManySubscriptions`` if it already holds that many."""
    secret = new_secret()
    with database.atomic():
        if most is not None:
            for_update(User.select(User.id).where(User.id == owner_id)).execute()
            held = Subscription.select().where(Subscription.owner == owner_id).count()
            if held >= most:
                raise TooManySubscriptions(held)
        subscription = Subscription.create(
            owner=owner_id, url=url, bearer_token=seal(bearer), secret=seal(secret),
            **throttle.limited(rate_limit), created_at=clock.read())
    return subscription, secret


def change(subscription_id, url=UNCHANGED, bearer=UNCHANGED, rate_limit=UNCHANGED):
    """Change what is given, at least one (``bearer`` or ``rate_limit`` None:
    remove it); whether the subscription was there."""
    values = {}
    if url is not UNCHANGED:
        values["url"] = url
    if bearer is not UNCHANGED:
        values["bearer_token"] = seal(bearer)
    if rate_limit is not UNCHANGED:
        values.update(throttle.limited(rate_limit))
    with database.atomic():
        return bool(Subscription.update(**values)
                    .where(Subscription.id == subscription_id).execute())


def locked(subscription_id):
    """The subscription, its row locked until the transaction ends (so two
    rotations run one after the other), or None."""
    return for_update(Subscription.select()
                      .where(Subscription.id == subscription_id)).first()


def replace_secret(subscription_id, secret, retired_secrets):
    """Sign with ``secret`` from now on, beside ``retired_secrets`` (as
    ``retired_secrets`` keeps them, their secrets already sealed)."""
    (Subscription.update(secret=seal(secret), retired_secrets=retired_secrets)
     .where(Subscription.id == subscription_id).execute())


def rewrite_if_unchanged(subscription_id, read, values):
    """Write ``values`` ({column name: stored value}) only if the columns
    ``read`` ({column name: stored value}) still hold what was read; whether
    it was written (a rotation or a PATCH coming first wins)."""
    unchanged = [getattr(Subscription, name).is_null() if value is None
                 else getattr(Subscription, name) == value for name, value in read.items()]
    return bool(Subscription.update(**values)
                .where(Subscription.id == subscription_id, *unchanged).execute())
