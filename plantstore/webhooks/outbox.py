"""The transactional outbox: one delivery row per active subscription that
hears about the plant (see ``audience``), written in the same database
transaction as the plant it announces."""
import datetime
import uuid

from flask import current_app, json

from ..db import Statement
from ..models import Delivery, utcnow
from . import audience
from .config import settings_of
from .jobs import job_for

NEW_PLANT_EVENT = "plant.created"


def new_plant_payload(plant):
    """The NewPlant body receivers get: id, name, and tag when it is set."""
    body = {"id": plant.id, "name": plant.name}
    if plant.tag is not None:
        body["tag"] = plant.tag
    return json.dumps(body)


# Every create runs this: compiled once (see db.Statement).
_INSERT_DELIVERY = Statement(
    lambda subscription, message_id, event_type, payload, status, attempts,
    next_attempt_at, locked_until, created_at: Delivery.insert(
        subscription=subscription, message_id=message_id, event_type=event_type,
        payload=payload, status=status, attempts=attempts,
        next_attempt_at=next_attempt_at, locked_until=locked_until,
        created_at=created_at).returning(Delivery.id),
    -1, "msg_example", "event", "{}", "status", -2, datetime.datetime(2000, 1, 1),
    datetime.datetime(2000, 1, 2), datetime.datetime(2000, 1, 3))


def record_new_plant(plant):
    """Queue a "New Plant" delivery for every active subscription that hears about it.

    Must run inside the transaction that creates ``plant``, so the plant and
    its announcements commit, or roll back, together. The rows are leased to
    the calling request, which sends them once committed
    (``dispatch.send_after_commit``); workers leave them alone until the
    lease expires, so a process that dies after the commit delays the
    deliveries but never loses them. Returns the jobs to send.
    """
    subscriptions = audience.hearing_about(plant.owner_id)
    if not subscriptions:
        return []
    now = utcnow()
    leased_until = now + datetime.timedelta(
        seconds=settings_of(current_app).lease_seconds)
    payload = new_plant_payload(plant)
    jobs = []
    for subscription in subscriptions:
        message_id = f"msg_{uuid.uuid4().hex}"
        [(delivery_id,)] = _INSERT_DELIVERY.rows(
            subscription.id, message_id, NEW_PLANT_EVENT, payload, Delivery.PENDING, 0,
            now, leased_until, now)
        delivery = Delivery(id=delivery_id, message_id=message_id, payload=payload,
                            attempts=0)
        jobs.append(job_for(delivery, subscription, leased_until, now))
    return jobs
