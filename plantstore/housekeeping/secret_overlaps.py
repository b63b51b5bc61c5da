"""Housekeeping: rotated-out signing secrets whose overlap ended stop signing
(``webhooks/subscriptions/secrets.py`` says how a rotation keeps them)."""
import json

from ..db import clock
from ..db.models import Subscription
from ..webhooks.receivers.secrets import retired, stored
from ..webhooks.subscriptions import store


def drop_ended_overlaps():
    """Forget the rotated-out secrets whose overlap has ended by
    the database's clock; how many subscriptions changed. A rotation that
    changed a subscription meanwhile wins (its own rotation dropped them)."""
    now = clock.read()
    changed = 0
    rotated = (Subscription.select(Subscription.id, Subscription.retired_secrets)
               .where(Subscription.retired_secrets.is_null(False)))
    for subscription in rotated:
        kept = retired(subscription, now)
        if len(kept) < len(json.loads(subscription.retired_secrets)):
            changed += store.rewrite_if_unchanged(
                subscription.id, {"retired_secrets": subscription.retired_secrets},
                {"retired_secrets": stored(kept)})
    return changed


def run(settings):
    """Drop the ended overlaps; how many subscriptions changed."""
    return drop_ended_overlaps()
