"""The SQLite delivery store: one host, one writer at a time.

Simpler than PostgreSQL's where one host allows it, as Oban's lite engine
is: a claim reads its candidates and leases its shares inside one write
transaction (``BEGIN IMMEDIATE``, taken in turns: see ``db``), so no
other claim runs meanwhile and nothing needs skipping; a breaker's state is
read in the outcome batch's transaction, which no other writer can enter.
Times are the process's clock (the host's: see ``db/clock.py``), passed in.
Its statements are the named queries of ``webhooks/engine/store/sqlite.sql``; the
throttle's buckets are refilled and taken by ``rules``' bucket rule, here.
"""
import datetime
import json
import os

from ....db import clock, database
from ....db.named_sql import Queries
from .. import rules
from ..rules import BreakerState
from . import new_message_id

TAKES_TOKEN_AT_INSERT = False  # a web process takes its token itself (throttle.admits)
LOCKS_ROWS = False  # one writer at a time: no row locks to order
CHECKS_CALLER_IN_WRITE = False  # the caller checks the token, claims the key, then writes
LEASES_AND_JOBS_MAY_DISAGREE = False  # leases and jobs are read in one write transaction

QUERIES = Queries(os.path.join(os.path.dirname(__file__), "sqlite.sql"))


def claim_transaction():
    return database.atomic()


def due_candidates(most, due_by):
    now = clock.now()
    due = []
    for subscription in QUERIES.rows("active_subscriptions", {"now": now}):
        rows = QUERIES.rows("due_of_subscription", {
            "subscription_id": subscription["subscription_id"], "due_by": due_by or now,
            "now": now, "most": 1 if subscription["breaker_open"] else most})
        due.extend(((row["next_attempt_at"], row["delivery_id"]), subscription) for row in rows)
    due.sort(key=lambda entry: entry[0])
    return [subscription for _, subscription in due]


def oldest_due_age():
    now = clock.now()
    rows = QUERIES.rows("oldest_due", {"now": now, "due_by": now})
    return (now - _stored_time(rows[0]["next_attempt_at"])).total_seconds() if rows else 0.0


def lease(shares, probes, due_by, settings):
    now = clock.now()
    leased = []
    for subscription_id, taken in shares.items():
        if subscription_id in probes and not QUERIES.execute("take_probe", {
                "subscription_id": subscription_id, "now": now,
                "next_probe": clock.after(settings.breaker_cooldown)}).rowcount:
            continue
        leased += [row["delivery_id"] for row in QUERIES.rows("lease_share", {
            "subscription_id": subscription_id, "taken": taken, "due_by": due_by or now,
            "now": now, "until": clock.after(settings.lease_seconds)})]
    return jobs_of(leased) if leased else []


def jobs_of(delivery_ids):
    return QUERIES.rows("jobs_of", {"ids": json.dumps(list(delivery_ids))})


def store_new_plant(plant, event_type, payload, traceparent, lease_seconds,
                    token=None, key_claim=None):
    now, until = clock.now(), clock.after(lease_seconds)
    with database.atomic():
        QUERIES.execute("insert_plant", {"id": plant.id, "owner": plant.owner_id,
                                         "name": plant.name, "tag": plant.tag, "now": now})
        delivery_ids = [QUERIES.execute("insert_delivery", {
            "subscription_id": subscription["subscription_id"],
            "message_id": new_message_id(), "event_type": event_type, "payload": payload,
            "now": now, "until": None if subscription["breaker_open"] else until,
            "traceparent": traceparent}).lastrowid
            for subscription in QUERIES.rows("audience", {"owner": plant.owner_id})]
        return jobs_of(delivery_ids) if delivery_ids else []


def insert_delivery(subscription_id, event_type, payload, lease_seconds, traceparent=None):
    with database.atomic():
        return QUERIES.execute("insert_delivery", {
            "subscription_id": subscription_id, "message_id": new_message_id(),
            "event_type": event_type, "payload": payload, "now": clock.now(),
            "until": None if lease_seconds is None else clock.after(lease_seconds),
            "traceparent": traceparent}).lastrowid


def take_for_resend(delivery_id, lease_seconds):
    with database.atomic():
        return bool(QUERIES.rows("take_for_resend", {
            "id": delivery_id, "now": clock.now(), "until": clock.after(lease_seconds)}))


def breaker_states(subscription_ids):
    if not subscription_ids:
        return {}
    return {row["subscription_id"]: BreakerState(row["failure_streak"],
                                                 bool(row["breaker_open"]))
            for row in QUERIES.rows("breaker_states",
                                    {"ids": json.dumps(sorted(subscription_ids))})}


def write_outcomes(outcomes, moves, settings):
    now = clock.now()
    rows = [{"delivery_id": o.delivery_id, "lease": o.lease, "status": o.status,
             "last_error": o.last_error,
             "delivered_at": _stamp(now) if o.status == "delivered" else None,
             "next_attempt_at": None if o.retry_in is None else _stamp(clock.after(o.retry_in))}
            for o in outcomes]
    with database.atomic():
        written = {(row["delivery_id"], row["lease"]) for row in QUERIES.rows(
            "move_on", {"outcomes": json.dumps(rows)})}
        attempts = [{"delivery_id": o.delivery_id, "started_at": _stamp(o.started_at),
                     "status_code": o.status_code, "error": o.error,
                     "duration_ms": o.duration_ms, "response_body": o.response_body}
                    for o in outcomes if (o.delivery_id, o.lease) in written]
        if attempts:
            QUERIES.execute("log_attempts", {"attempts": json.dumps(attempts)})
        next_probe = clock.after(settings.breaker_cooldown)
        for subscription_id, move in moves.items():
            QUERIES.execute("move_breaker", {
                "subscription_id": subscription_id, "streak": move.streak,
                "opened": move.opened, "probe": move.probe, "succeeded": move.succeeded,
                "now": now, "next_probe": next_probe})
    return {delivery_id for delivery_id, _ in written}


def _stamp(moment):
    """A time as the sqlite3 module stores a ``datetime`` (for a JSON batch)."""
    return moment.isoformat(" ")


def sending_settings(subscription_ids):
    return {row["subscription_id"]: row
            for row in QUERIES.rows("sending_settings",
                                    {"ids": json.dumps(sorted(subscription_ids))})}


def still_there(delivery_ids):
    return {row["delivery_id"] for row in QUERIES.rows(
        "still_there", {"ids": json.dumps(list(delivery_ids))})}


def give_back(leases):
    with database.atomic():
        for delivery_id, lease in leases:
            QUERIES.execute("give_back", {"delivery_id": delivery_id, "lease": lease})


def stop_subscription(subscription_id, reason, failing_cutoff_seconds=None):
    values = {"id": subscription_id, "reason": reason, "now": clock.now()}
    with database.atomic():
        if failing_cutoff_seconds is None:
            QUERIES.execute("stop_subscription", values)
        elif not QUERIES.rows("stop_failing_subscription", {
                **values, "cutoff": clock.before(failing_cutoff_seconds)}):
            return False
        _fail_waiting(subscription_id, reason)
    return True


def fail_stray_deliveries(limit):
    failed = 0
    with database.atomic():
        for row in QUERIES.rows("disabled_with_waiting", {"limit": limit}):
            reason = QUERIES.rows("disabled_reason", {"id": row["subscription_id"]})
            if reason:
                failed += _fail_waiting(row["subscription_id"], reason[0]["disabled_reason"])
    return failed


def _fail_waiting(subscription_id, reason):
    return QUERIES.execute("fail_waiting", {
        "id": subscription_id, "last_error": f"subscription disabled: {reason}"}).rowcount


def enable(subscription_id):
    with database.atomic():
        QUERIES.execute("enable", {"id": subscription_id, "now": clock.now()})


def delete_subscription(subscription_id):
    QUERIES.execute("delete_attempts_of_subscription", {"id": subscription_id})
    QUERIES.execute("delete_deliveries_of_subscription", {"id": subscription_id})
    return bool(QUERIES.execute("delete_subscription", {"id": subscription_id}).rowcount)


def recover(subscription_id, since):
    with database.atomic():
        return QUERIES.execute("recover", {"id": subscription_id, "since": since,
                                           "now": clock.now()}).rowcount


def purge_batch(older_than_days, limit):
    cutoff = clock.before(older_than_days * 86400)
    with database.atomic():
        ids = [row["id"] for row in QUERIES.rows("finished_before",
                                                 {"cutoff": cutoff, "limit": limit})]
        if not ids:
            return 0
        QUERIES.execute("purge_attempts", {"ids": json.dumps(ids)})
        return QUERIES.execute("purge_deliveries", {"ids": json.dumps(ids),
                                                    "cutoff": cutoff}).rowcount


def throttle_take_for_claim(rooms, default_room, limit, due_by):
    now = clock.now()
    wants = {row["subscription_id"]: rules.claim_tokens_wanted(
                 row["breaker_open"], rooms.get(row["subscription_id"], default_room), limit)
             for row in QUERIES.rows("throttle_due_subscriptions",
                                     {"now": now, "due_by": due_by or now})}
    return _take_throttled(wants) if wants else {}


def throttle_take(wants):
    if not QUERIES.rows("throttle_buckets", {"ids": json.dumps(list(wants))}):
        return {}  # none throttled: no write transaction
    return _take_throttled(wants)


def _take_throttled(wants):
    """Take tokens for those of ``wants`` that are throttled, by ``rules``'
    bucket (one host: the process's clock is the host's)."""
    taken = {}
    with database.atomic():
        now = clock.now()
        for bucket in QUERIES.rows("throttle_buckets", {"ids": json.dumps(list(wants))}):
            subscription_id = bucket["subscription_id"]
            refilled_at = _stored_time(bucket["throttle_refilled_at"]) or now
            level = rules.bucket_level(bucket["rate_limit"], bucket["throttle_tokens"],
                                       (now - refilled_at).total_seconds())
            taken[subscription_id] = n = rules.tokens_taken(level, wants[subscription_id])
            if n:
                QUERIES.execute("throttle_spend", {
                    "subscription_id": subscription_id, "tokens": level - n,
                    "refilled_at": max(refilled_at, now)})
    return taken


def throttle_give_back(unused):
    with database.atomic():
        for bucket in QUERIES.rows("throttle_buckets", {"ids": json.dumps(list(unused))}):
            QUERIES.execute("throttle_put_back", {
                "subscription_id": bucket["subscription_id"],
                "tokens": rules.tokens_given_back(bucket["rate_limit"],
                                                  bucket["throttle_tokens"],
                                                  unused[bucket["subscription_id"]])})


def _stored_time(text):
    """A time as SQLite holds it (text), read back; None stays None."""
    return None if text is None else datetime.datetime.fromisoformat(text)
