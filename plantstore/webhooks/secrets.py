"""Signing secrets of a subscription: the current one and those rotated out.

Rotating makes a new current secret; the one it replaces keeps signing
beside it until its own overlap (``PLANTSTORE_WEBHOOK_SECRET_OVERLAP_HOURS``)
ends, however many rotations follow, so a receiver still holding any
secret of the last overlap keeps accepting messages. At most
``MAX_RETIRED_SECRETS`` rotated-out secrets are kept: a rotation beyond that
drops the one that would stop signing first, and says so.
"""
import dataclasses
import datetime
import json

from ..db import database, is_sqlite
from ..models import Subscription, utcnow
from .signing import new_secret

MAX_RETIRED_SECRETS = 4
"""Rotated-out secrets that may sign at once (so at most five signatures)."""


def retired(subscription, now):
    """The rotated-out secrets of ``subscription`` still signing at ``now``:
    (secret, expires_at) pairs, newest first."""
    entries = json.loads(subscription.retired_secrets or "[]")
    pairs = [(entry["secret"], datetime.datetime.fromisoformat(entry["expires_at"]))
             for entry in entries]
    return [(secret, expires) for secret, expires in pairs if expires > now]


def signing_secrets(subscription, now):
    """The secrets that sign a message sent at ``now``: the current one first."""
    return (subscription.secret,) + tuple(secret for secret, _ in retired(subscription, now))


@dataclasses.dataclass(frozen=True)
class Rotation:
    """What a rotation did: the new secret, when the replaced one stops
    signing, and how many old secrets were dropped to respect the cap."""
    secret: str
    previous_expires_at: datetime.datetime
    dropped: int


def rotate(subscription_id, overlap_hours):
    """Give a subscription a new secret; the replaced one signs for the overlap.

    Returns a ``Rotation``, or None when there is no such subscription.
    """
    now = utcnow()
    expires = now + datetime.timedelta(hours=overlap_hours)
    with database.atomic():
        query = Subscription.select().where(Subscription.id == subscription_id)
        if not is_sqlite():
            query = query.for_update()  # two rotations at once: one after the other
        subscription = query.first()
        if subscription is None:
            return None
        kept = [(subscription.secret, expires)] + retired(subscription, now)
        if overlap_hours <= 0:
            kept = kept[1:]
        dropped = max(0, len(kept) - MAX_RETIRED_SECRETS)
        kept = sorted(kept, key=lambda pair: pair[1], reverse=True)[:MAX_RETIRED_SECRETS]
        secret = new_secret()
        (Subscription.update(secret=secret, retired_secrets=json.dumps(
            [{"secret": old, "expires_at": until.isoformat()} for old, until in kept]))
         .where(Subscription.id == subscription_id).execute())
    return Rotation(secret, expires, dropped)
