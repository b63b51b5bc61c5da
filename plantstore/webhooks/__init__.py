"""The "New Plant" webhook: the queue of deliveries, signing, sending and the worker.

The create route's one entry point is ``store_and_announce``.
"""
from flask import json

from .. import tracing
from ..db import database
from . import queue

NEW_PLANT_EVENT = "plant.created"


def new_plant_payload(plant):
    """The NewPlant body receivers get: id, name, and tag when it is set."""
    body = {"id": plant.id, "name": plant.name}
    if plant.tag is not None:
        body["tag"] = plant.tag
    return json.dumps(body)


def store_and_announce(plant, web_sender, key_claim=None, token=None):
    """Store ``plant`` with a delivery for every subscription that hears about
    it, together, and have ``web_sender`` attempt them once that commits.

    Never waits for a receiver: the attempts run in the sender's threads, and
    deliveries that find no free slot are left to the workers. If the
    transaction rolls back, nothing is stored and nothing sent.
    IntegrityError if the plant's id is taken; ``key_claim`` and ``token``:
    see ``queue.store_plant``.
    """
    jobs = queue.store_plant(plant, NEW_PLANT_EVENT, new_plant_payload(plant),
                             web_sender.settings, tracing.current_traceparent(), key_claim,
                             token)
    if jobs:
        context = tracing.capture_context()
        database.after_commit(lambda: web_sender.offer(jobs, context))
