"""The transactional outbox: one delivery row per active subscription,
written in the same database transaction as the plant it announces."""
import datetime
import uuid

from flask import current_app, json

from ..db import Statement
from ..models import Delivery, Subscription, utcnow
from .config import settings_of
from .jobs import job_for

NEW_PLANT_EVENT = "plant.created"


def new_plant_payload(plant):
    """The NewPlant body receivers get: id, name, and tag when it is set."""
    body = {"id": plant.id, "name": plant.name}
    if plant.tag is not None:
        body["tag"] = plant.tag
    return json.dumps(body)


# Every create runs this query: compiled once (see db.Statement).
_ACTIVE_SUBSCRIPTIONS = Statement(
    lambda active: Subscription.select().where(Subscription.is_active == active), True)


def record_new_plant(plant):
    """Queue a "New Plant" delivery for every active subscription.

    Must run inside the transaction that creates ``plant``, so the plant and
    its announcements commit, or roll back, together. The rows are leased to
    the calling request, which sends them once committed
    (``dispatch.send_after_commit``); workers leave them alone until the
    lease expires, so a process that dies after the commit delays the
    deliveries but never loses them. Returns the jobs to send.
    """
    subscriptions = _ACTIVE_SUBSCRIPTIONS.models(Subscription, True)
    if not subscriptions:
        return []
    now = utcnow()
    leased_until = now + datetime.timedelta(
        seconds=settings_of(current_app).lease_seconds)
    payload = new_plant_payload(plant)
    rows = [{"subscription": subscription.id, "message_id": f"msg_{uuid.uuid4().hex}",
             "event_type": NEW_PLANT_EVENT, "payload": payload,
             "next_attempt_at": now, "locked_until": leased_until}
            for subscription in subscriptions]
    # RETURNING gives no row order on SQLite: match ids by webhook-id.
    ids = dict(Delivery.insert_many(rows)
               .returning(Delivery.message_id, Delivery.id).tuples().execute())
    return [job_for(Delivery(id=ids[row["message_id"]], message_id=row["message_id"],
                             payload=payload, attempts=0),
                    subscription, leased_until, now)
            for row, subscription in zip(rows, subscriptions)]
