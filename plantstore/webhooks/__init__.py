"""The "New Plant" webhook: the queue of deliveries, signing, sending and the worker.

A create (``plants/create.py``) stores a plant with its deliveries and
hands their jobs to ``announce``.
"""
from flask import json

from ..db import database
from .sending import spans

NEW_PLANT_EVENT = "plant.created"


def new_plant_payload(plant):
    """The NewPlant body receivers get: id, name, and tag when it is set."""
    body = {"id": plant.id, "name": plant.name}
    if plant.tag is not None:
        body["tag"] = plant.tag
    return json.dumps(body)


def announce(jobs, web_sender):
    """Have ``web_sender`` attempt a create's ``jobs`` once its transaction
    commits (never waiting for a receiver: the attempts run in the sender's
    threads, and deliveries that find no free slot are left to the
    workers). If the transaction rolls back, nothing is sent."""
    if jobs:
        context = spans.capture_context()
        database.after_commit(lambda: web_sender.offer(jobs, context))

