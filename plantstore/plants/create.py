"""A plant's create transaction: the plant, one webhook delivery per
subscription that hears about it and, with an ``Idempotency-Key``, the
key's claim and answer, all or nothing.

On PostgreSQL it is one statement (``plantstore_store_plant_v2`` or
``plantstore_store_keyed_plant_v2``, migration 0010): the token is checked
in it too, and if it is not valid nothing is written (``TokenRefused``);
if the key is taken nothing is written and ``KeyTaken`` says what was
found. A subscription deleted while the statement ran fails it as a
whole (its delivery's foreign key): it is tried again, and the plant
goes on without that subscription. On SQLite (one host) it is one
transaction, nested in the caller's (the idempotency decorator's, which
claims the key there).

The deliveries whose receiver's breaker is closed are leased to the
calling process, which attempts them once committed
(``webhooks.announce``); workers leave them alone until the lease runs
out, so a process that dies after the commit delays them but never loses
them.
"""
import os
import time

from peewee import IntegrityError

from .. import clock, webhooks
from ..auth import TokenRefused
from ..db import database, is_sqlite
from ..idempotency import KeyTaken
from ..named_sql import Queries
from ..webhooks.engine import queue
from ..webhooks.engine.store import sqlite as sqlite_deliveries
from ..webhooks.sending import spans

SQL_DIR = os.path.join(os.path.dirname(__file__), "sql")
POSTGRES = Queries(os.path.join(SQL_DIR, "postgres.sql"))
SQLITE = Queries(os.path.join(SQL_DIR, "sqlite.sql"))

FOREIGN_KEY_VIOLATION = "23503"
"""PostgreSQL's SQLSTATE for a row referring to one that is not there."""

FOUND_COLUMNS = ("found_fingerprint", "found_status", "found_content_type", "found_body",
                 "found_expired")
"""The key's committed row as a keyed create's statement found it."""


def create_and_announce(plant, web_sender, key_claim=None, token=None):
    """Store ``plant`` with its deliveries and have ``web_sender`` attempt
    them once that commits; IntegrityError if the plant's id is taken."""
    jobs = store_plant(plant, webhooks.NEW_PLANT_EVENT, webhooks.new_plant_payload(plant),
                       web_sender.settings, spans.current_traceparent(), key_claim, token)
    webhooks.announce(jobs, web_sender)


def store_plant(plant, event_type, payload, settings, traceparent=None, key_claim=None,
                token=None):
    """Store ``plant`` with one pending delivery per active subscription that
    hears about it, together; the jobs this process attempts once committed.
    ``token``: an ``auth.PresentedToken`` the statement checks (PostgreSQL);
    ``key_claim``: an ``idempotency.KeyClaim`` it claims (PostgreSQL)."""
    leased_at = time.monotonic()
    if is_sqlite():
        with database.atomic():
            SQLITE.execute("insert_plant", {"id": plant.id, "owner": plant.owner_id,
                                            "name": plant.name, "tag": plant.tag,
                                            "now": clock.now()})
            rows = sqlite_deliveries.enqueue_new_plant(plant.owner_id, event_type, payload,
                                                       traceparent, settings.lease_seconds)
        return queue.jobs_to_send(rows, leased_at, settings)
    values = {"id": plant.id, "owner": plant.owner_id, "name": plant.name, "tag": plant.tag,
              "event": event_type, "payload": payload, "traceparent": traceparent,
              "lease_seconds": settings.lease_seconds,
              "token_digest": token and token.digest, "scope": token and token.scope}
    rows = _retried_while_subscriptions_vanish(
        lambda: POSTGRES.rows("store_plant", values) if key_claim is None
        else _store_keyed(values, key_claim))
    if not rows:
        raise TokenRefused()
    return queue.jobs_to_send([row for row in rows if row["delivery_id"] is not None],
                              leased_at, settings)


VANISHED_TRIES = 4
"""Statements a create tries while subscriptions it read are deleted under it."""


class SubscriptionsChanging(Exception):
    """Subscriptions were deleted under every try of a create: nothing was
    stored (a 503 that asks to try again, never a 409)."""


def _a_subscription_vanished(error):
    """Whether ``error`` is a create's delivery referring to a subscription
    deleted after the statement read it (not the plant's id taken)."""
    cause = error.__context__
    return (getattr(cause, "pgcode", None) == FOREIGN_KEY_VIOLATION
            and getattr(getattr(cause, "diag", None), "table_name", None) == "delivery")


def _retried_while_subscriptions_vanish(store):
    """``store()``'s rows, tried again when a subscription it would announce
    the plant to was deleted meanwhile (its delivery fails the foreign key
    and nothing is written): the next try's snapshot no longer holds it.
    Inside a transaction, each try is a savepoint."""
    for tries_left in range(VANISHED_TRIES - 1, -1, -1):
        try:
            if not database.transaction_depth():
                return store()
            with database.atomic():
                return store()
        except IntegrityError as error:
            if not _a_subscription_vanished(error):
                raise
            if not tries_left:
                raise SubscriptionsChanging() from None


def _store_keyed(values, key_claim):
    """The keyed store's rows (``KeyTaken`` if it claimed no key)."""
    try:
        rows = POSTGRES.rows("store_keyed_plant", {
            **values, "key": key_claim.key, "fingerprint": key_claim.fingerprint,
            "ttl_seconds": key_claim.ttl_seconds, "status": key_claim.status,
            "content_type": key_claim.content_type, "body": key_claim.body})
    except IntegrityError as error:
        if "idempotency_key" not in str(error):
            raise
        # The key's row was committed after this statement's snapshot was
        # taken: the key's lock was free, the row taken; the next try sees it.
        raise KeyTaken(True, *[None] * len(FOUND_COLUMNS)) from None
    if rows and not rows[0]["key_claimed"]:
        raise KeyTaken(rows[0]["key_lock_held"], *(rows[0][name] for name in FOUND_COLUMNS))
    return rows
