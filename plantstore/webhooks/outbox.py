"""The transactional outbox: one delivery row per active subscription,
written in the same database transaction as the plant it announces."""
import uuid

from flask import json

from ..models import Delivery, Subscription

NEW_PLANT_EVENT = "plant.created"


def new_plant_payload(plant):
    """The NewPlant body receivers get: id, name, and tag when it is set."""
    body = {"id": plant.id, "name": plant.name}
    if plant.tag is not None:
        body["tag"] = plant.tag
    return json.dumps(body)


def record_new_plant(plant):
    """Queue a "New Plant" delivery for every active subscription.

    Must run inside the transaction that creates ``plant``, so the plant and
    its announcements commit, or roll back, together. Returns their
    webhook-ids.
    """
    subscription_ids = [row[0] for row in
                        Subscription.select(Subscription.id)
                        .where(Subscription.is_active == True)  # noqa: E712
                        .tuples()]
    if not subscription_ids:
        return []
    payload = new_plant_payload(plant)
    rows = [{"subscription": sid, "message_id": f"msg_{uuid.uuid4().hex}",
             "event_type": NEW_PLANT_EVENT, "payload": payload}
            for sid in subscription_ids]
    Delivery.insert_many(rows).execute()
    return [row["message_id"] for row in rows]
