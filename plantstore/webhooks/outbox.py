"""The transactional outbox: one delivery row per active subscription that
hears about the plant (see ``audience``), written in the same database
transaction as the plant it announces."""
import datetime
import uuid

from flask import json

from .. import metrics
from ..db import Statement
from ..models import Delivery, utcnow
from . import audience
from .breaker import is_open
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


def record_new_plant(plant, settings):
    """Queue a "New Plant" delivery for every active subscription that hears about it.

    Must run inside the transaction that creates ``plant``, so the plant and
    its announcements commit, or roll back, together. Rows of receivers
    whose circuit breaker is closed are leased to the calling process, which
    attempts them once committed; workers leave them alone until the lease
    expires, so a process that dies after the commit delays the deliveries
    but never loses them. Rows of receivers whose breaker is open are left
    to the workers at once. Returns the jobs to attempt.
    """
    subscriptions = audience.hearing_about(plant.owner_id)
    if not subscriptions:
        return []
    now = utcnow()
    lease = now + datetime.timedelta(seconds=settings.lease_seconds)
    payload = new_plant_payload(plant)
    jobs = []
    for subscription in subscriptions:
        message_id = f"msg_{uuid.uuid4().hex}"
        attempt_now = not is_open(subscription)
        [(delivery_id,)] = _INSERT_DELIVERY.rows(
            subscription.id, message_id, NEW_PLANT_EVENT, payload, Delivery.PENDING, 0,
            now, lease if attempt_now else None, now)
        if not attempt_now:
            metrics.count_left_to_worker("breaker open")
            continue
        delivery = Delivery(id=delivery_id, message_id=message_id, payload=payload,
                            attempts=0)
        jobs.append(job_for(delivery, subscription, lease, now))
    return jobs
