"""The "New Plant" webhook: the one face ``plants/`` imports.

A create stores its plant and one webhook delivery per subscription that
hears about it, all or nothing, through the delivery store (enqueueing's
one door, ``engine.store.DeliveryStore.store_new_plant``): on PostgreSQL
one statement that also checks the token (``engine.store.TokenRefused``) and
claims an ``Idempotency-Key`` (``engine.store.KeyTaken``); on SQLite one
transaction, nested in the idempotency decorator's. The deliveries whose
receiver's breaker is closed are leased to the calling process, which
attempts them once committed (``announce``); workers leave them alone until
the lease runs out, so a process that dies after the commit delays them but
never loses them.

The parts: ``engine/`` (a delivery's state), ``sending/`` (the attempts),
``subscriptions/`` (the API and who hears), ``receivers/`` (what the last two
both need); the operators' commands are ``plantstore/cli/``.
"""
import json

from ..db import database
from .config import settings_of, web_sender_of
from .engine import store
from .engine.queue import store_new_plant as _store_new_plant
from .engine.store import SubscriptionsChanging
from .sending import spans

__all__ = ["NEW_PLANT_EVENT", "SubscriptionsChanging", "announce", "create_checks_caller",
           "new_plant_payload", "store_and_announce", "store_new_plant"]

NEW_PLANT_EVENT = "plant.created"


def new_plant_payload(plant):
    """The NewPlant body receivers get: id, name, and tag when it is set."""
    body = {"id": plant.id, "name": plant.name}
    if plant.tag is not None:
        body["tag"] = plant.tag
    return json.dumps(body)


def create_checks_caller():
    """Whether ``store_new_plant`` itself checks the caller's token and
    claims its ``Idempotency-Key`` (so the create route leaves both to it):
    the bound database's store's ``CHECKS_CALLER_IN_WRITE``."""
    return store.current().CHECKS_CALLER_IN_WRITE


def store_new_plant(plant, app, token=None, key_claim=None):
    """Store ``plant`` and its "New Plant" deliveries together, in the
    current trace; the jobs to ``announce``. ``token`` and ``key_claim``:
    see ``engine.store.DeliveryStore.store_new_plant``."""
    return _store_new_plant(plant, NEW_PLANT_EVENT, new_plant_payload(plant), settings_of(app),
                            spans.current_traceparent(), token, key_claim)


def store_and_announce(plant, app, token=None, key_claim=None):
    """Store ``plant`` with its deliveries (``IntegrityError`` if its id is
    taken, ``SubscriptionsChanging`` if subscriptions kept vanishing under
    it) and have ``app``'s web sender attempt them once that commits."""
    announce(store_new_plant(plant, app, token, key_claim), web_sender_of(app))


def announce(jobs, web_sender):
    """Have ``web_sender`` attempt a create's ``jobs`` once its transaction
    commits (never waiting for a receiver: the attempts run in the sender's
    threads, and deliveries that find no free slot are left to the
    workers). If the transaction rolls back, nothing is sent."""
    if jobs:
        context = spans.capture_context()
        database.after_commit(lambda: web_sender.offer(jobs, context))
