"""The PostgreSQL delivery store: many hosts share it.

Every statement is one round trip in autocommit unless the caller opened a
transaction; the claim's lease, the outcome batch and a create's store are
versioned PL/pgSQL functions (``migrations/functions/``: a function keeps
its plans for the session, through PgBouncer's transaction pooling too).
A claim is two statements: ``due_candidates`` (read), then, once
``rules.fair_shares`` has chosen, ``plantstore_claim_v4``, which locks each
subscription's share ``FOR UPDATE SKIP LOCKED`` and re-checks every row,
so two claims racing each other never lease a row twice and the one that
loses takes the next due rows instead. What is due is written once, in
migration 0018's ``plantstore_delivery_due_v1`` and
``plantstore_subscription_due_v1``, which the claim's functions and
``oldest_due_age`` call (inlined by the planner). The throttle's buckets are refilled
and taken by ``plantstore_throttle_take_v1`` (migration 0011), a create's
token by that migration's trigger, in the create's own statement.
"""
import contextlib
import json
import os

from peewee import DatabaseError, IntegrityError

from ....db import database
from ....db.named_sql import Queries
from ..rules import BreakerState
from . import KeyTaken, SubscriptionsChanging, TokenRefused, new_message_id

TAKES_TOKEN_AT_INSERT = True  # migration 0011's trigger: lease 0 when it had none
LOCKS_ROWS = True  # writers of many hosts: subscription rows are locked before deliveries
CHECKS_CALLER_IN_WRITE = True  # store_new_plant's one statement: token and key too
LEASES_AND_JOBS_MAY_DISAGREE = True  # each statement of that function has its own snapshot

QUERIES = Queries(os.path.join(os.path.dirname(__file__), "postgres.sql"))

FOREIGN_KEY_VIOLATION = "23503"
"""PostgreSQL's SQLSTATE for a row referring to one that is not there."""

VANISHED_TRIES = 4
"""Statements a create tries while subscriptions it read are deleted under it."""

FOUND_COLUMNS = ("found_fingerprint", "found_status", "found_content_type", "found_body",
                 "found_expired")
"""The key's committed row as a keyed create's statement found it."""

TOKEN_REFUSED = "28000"
"""The SQLSTATE of a create whose token is not valid (nothing written)."""

KEY_TAKEN = "PSKEY"
"""The SQLSTATE of a keyed create that claimed no key (nothing written)."""


def store_new_plant(plant, event_type, payload, traceparent, lease_seconds,
                    token=None, key_claim=None):
    values = {"id": plant.id, "owner": plant.owner_id, "name": plant.name, "tag": plant.tag,
              "event": event_type, "payload": payload, "traceparent": traceparent,
              "lease_seconds": lease_seconds,
              "token_digest": token and token.digest, "scope": token and token.scope}
    return _retried_while_subscriptions_vanish(
        lambda: QUERIES.rows("store_plant", values) if key_claim is None
        else _store_keyed(values, key_claim))


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
        except DatabaseError as error:
            if _sqlstate(error) == TOKEN_REFUSED:
                raise TokenRefused() from None
            if _sqlstate(error) == KEY_TAKEN:
                raise _key_taken(error) from None
            raise


def _store_keyed(values, key_claim):
    """The keyed store's rows (``KeyTaken`` if it claimed no key)."""
    try:
        return QUERIES.rows("store_keyed_plant", {
            **values, "key": key_claim.key, "fingerprint": key_claim.fingerprint,
            "ttl_seconds": key_claim.ttl_seconds, "status": key_claim.status,
            "content_type": key_claim.content_type, "body": key_claim.body})
    except IntegrityError as error:
        if "idempotency_key" not in str(error):
            raise
        # The key's row was committed after this statement's snapshot was
        # taken: the key's lock was free, the row taken; the next try sees it.
        raise KeyTaken(True, *[None] * len(FOUND_COLUMNS)) from None


def _sqlstate(error):
    return getattr(error.__context__, "pgcode", None)


def _key_taken(error):
    """The ``KeyTaken`` a keyed create's PSKEY error describes (its detail:
    whether the key's lock was free, and its committed row as found)."""
    detail = json.loads(error.__context__.diag.message_detail)
    found = detail["found"] or {}
    return KeyTaken(detail["lock_held"],
                    *(found.get(name) for name in ("fingerprint", "status", "content_type",
                                                   "body", "expired")))


def claim_transaction():
    return contextlib.nullcontext()


def due_candidates(most, due_by):
    return QUERIES.rows("due_candidates", {"most": most, "due_by": due_by})


def oldest_due_age():
    return float(QUERIES.rows("oldest_due_age")[0]["age_seconds"])


def lease(shares, probes, due_by, settings):
    if not shares:
        return []
    return QUERIES.rows("claim", {
        "subscription_ids": list(shares), "shares": list(shares.values()), "due_by": due_by,
        "cooldown": settings.breaker_cooldown, "lease_seconds": settings.lease_seconds})


def jobs_of(delivery_ids):
    return QUERIES.rows("jobs_of", {"ids": list(delivery_ids)})


def insert_delivery(subscription_id, event_type, payload, lease_seconds, traceparent=None):
    [row] = QUERIES.rows("insert_delivery", {
        "subscription_id": subscription_id, "message_id": new_message_id(),
        "event_type": event_type, "payload": payload, "lease_seconds": lease_seconds,
        "traceparent": traceparent})
    return row["delivery_id"]


def take_for_resend(delivery_id, lease_seconds):
    return bool(QUERIES.rows("take_for_resend", {"id": delivery_id,
                                                  "lease_seconds": lease_seconds}))


def breaker_states(subscription_ids):
    if not subscription_ids:
        return {}
    return {row["subscription_id"]: BreakerState(row["failure_streak"], row["breaker_open"])
            for row in QUERIES.rows("breaker_states", {"ids": sorted(subscription_ids)})}


def write_outcomes(outcomes, moves, settings):
    rows = QUERIES.rows("record_outcomes", {
        "ids": [o.delivery_id for o in outcomes], "leases": [o.lease for o in outcomes],
        "statuses": [o.status for o in outcomes],
        "last_errors": [o.last_error for o in outcomes],
        "errors": [o.error for o in outcomes],
        "response_bodies": [o.response_body for o in outcomes],
        "retry_in": [o.retry_in for o in outcomes],
        "started_at": [o.started_at for o in outcomes],
        "status_codes": [o.status_code for o in outcomes],
        "durations": [o.duration_ms for o in outcomes],
        "subscription_ids": list(moves), "streaks": [m.streak for m in moves.values()],
        "opened": [m.opened for m in moves.values()],
        "probes": [m.probe for m in moves.values()],
        "succeeded": [m.succeeded for m in moves.values()],
        "cooldown": settings.breaker_cooldown})
    return {row["delivery_id"] for row in rows}


def sending_settings(subscription_ids):
    return {row["subscription_id"]: row
            for row in QUERIES.rows("sending_settings", {"ids": sorted(subscription_ids)})}


def still_there(delivery_ids):
    return {row["delivery_id"] for row in QUERIES.rows("still_there",
                                                       {"ids": list(delivery_ids)})}


def give_back(leases):
    QUERIES.execute("give_back", {"ids": [delivery_id for delivery_id, _ in leases],
                                  "leases": [lease for _, lease in leases]})


def stop_subscription(subscription_id, reason, failing_cutoff_seconds=None):
    values = {"id": subscription_id, "reason": reason}
    if failing_cutoff_seconds is None:
        QUERIES.execute("stop_subscription", values)
    elif not QUERIES.rows("stop_failing_subscription",
                          {**values, "cutoff_seconds": failing_cutoff_seconds}):
        return False
    _fail_waiting(subscription_id, reason)
    return True


def fail_stray_deliveries(limit):
    failed = 0
    for row in QUERIES.rows("disabled_with_waiting", {"limit": limit}):
        with database.atomic():
            locked = QUERIES.rows("lock_disabled_subscription", {"id": row["subscription_id"]})
            if locked:
                failed += _fail_waiting(row["subscription_id"], locked[0]["disabled_reason"])
    return failed


def _fail_waiting(subscription_id, reason):
    return QUERIES.execute("fail_waiting", {
        "id": subscription_id, "last_error": f"subscription disabled: {reason}"}).rowcount


def enable(subscription_id):
    QUERIES.execute("enable", {"id": subscription_id})


def delete_subscription(subscription_id):
    return bool(QUERIES.execute("delete_subscription", {"id": subscription_id}).rowcount)


def recover(subscription_id, since):
    QUERIES.execute("lock_subscription", {"id": subscription_id})
    return QUERIES.execute("recover", {"id": subscription_id, "since": since}).rowcount


def purge_batch(older_than_days, limit):
    ids = [row["id"] for row in QUERIES.rows("finished_before",
                                             {"days": older_than_days, "limit": limit})]
    if not ids:
        return 0
    QUERIES.execute("purge_attempts", {"ids": ids})
    return QUERIES.execute("purge_deliveries", {"ids": ids, "days": older_than_days}).rowcount


def throttle_take_for_claim(rooms, default_room, limit, due_by):
    return {row["subscription_id"]: row["tokens"] for row in QUERIES.rows(
        "throttle_take_for_claim", {"ids": list(rooms), "rooms": list(rooms.values()),
                                    "default_room": default_room, "limit": limit,
                                    "due_by": due_by})}


def throttle_take(wants):
    return {row["subscription_id"]: row["tokens"] for row in QUERIES.rows(
        "throttle_take", {"ids": list(wants), "wants": list(wants.values())})}


def throttle_give_back(unused):
    QUERIES.execute("throttle_give_back", {"ids": list(unused),
                                           "counts": list(unused.values())})
