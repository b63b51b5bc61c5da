"""Signing secrets of a subscription: the current one and those rotated out.

Rotating makes a new current secret; the one it replaces keeps signing
beside it until its own overlap (``PLANTSTORE_WEBHOOK_SECRET_OVERLAP_HOURS``)
ends, however many rotations follow, so a receiver still holding any
secret of the last overlap keeps accepting messages. At most
``MAX_RETIRED_SECRETS`` rotated-out secrets are kept: a rotation beyond that
drops the one that would stop signing first, and says so.

An overlap's end is the database's time, and only the database's clock
judges it: a rotation and the housekeeping that drops ended overlaps
(``housekeeping/secret_overlaps.py``) read it, and a sender signs with every secret the
subscription keeps, whatever its own host's clock says. A secret therefore
signs until the first housekeeping run after its overlap ends.
"""
import dataclasses
import datetime

from ...db import clock, database
from ..receivers.secrets import new_secret, retired, stored
from . import store

MAX_RETIRED_SECRETS = 4
"""Rotated-out secrets that may sign at once (so at most five signatures)."""


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
    with database.atomic():
        now = clock.read()
        expires = now + datetime.timedelta(hours=overlap_hours)
        subscription = store.locked(subscription_id)  # two rotations: one after the other
        if subscription is None:
            return None
        kept = [(subscription.secret, expires)] + retired(subscription, now)
        if overlap_hours <= 0:
            kept = kept[1:]
        dropped = max(0, len(kept) - MAX_RETIRED_SECRETS)
        kept = sorted(kept, key=lambda pair: pair[1], reverse=True)[:MAX_RETIRED_SECRETS]
        secret = new_secret()
        store.replace_secret(subscription_id, secret, stored(kept))
    return Rotation(secret, expires, dropped)
