"""The delivery queue's PostgreSQL statements, one per operation.

Each is a single statement, so in autocommit it is its own transaction and
costs one round trip; every time in them is the database's (``now()``), so
hosts whose clocks disagree still agree on leases and due times. SQLite runs
the same operations as plain peewee queries in a transaction (see
``queue.py``).

The claim and the outcome batch, which a worker runs hundreds of times a
second, call PL/pgSQL functions (migration 0008): a function keeps its
statement's plan for the session, where planning the statement on every
call took about three times as long as running it. Change them with a
migration that replaces the function.

Rows come back as ``JOB_COLUMNS`` (see ``queue.Job``).
"""

from ..clock import POSTGRES_NOW as NOW
from .audience import HEARING_ABOUT

JOB_COLUMNS = ("d.id, d.message_id, d.payload, d.attempts, d.lease, d.traceparent, "
               "s.id, s.owner_id, s.url, s.bearer_token, s.secret, s.retired_secrets, "
               "s.breaker_opened_at IS NOT NULL")

STORE_PLANT_WITH_DELIVERIES = f"""
WITH plant AS (
    INSERT INTO plant (id, owner_id, name, tag, created_at)
    VALUES (%(id)s, %(owner)s, %(name)s, %(tag)s, {NOW})
    RETURNING id
), s AS (  -- the active subscriptions that hear about a plant of this owner
    SELECT s.* FROM {HEARING_ABOUT.format(owner="%(owner)s")}
), d AS (  -- leased to this process unless the receiver's breaker is open
    INSERT INTO delivery (subscription_id, message_id, event_type, payload, status,
                          attempts, lease, next_attempt_at, locked_until, created_at,
                          traceparent)
    SELECT s.id, 'msg_' || replace(gen_random_uuid()::text, '-', ''), %(event)s,
           %(payload)s, 'pending', 0, 1, {NOW},
           CASE WHEN s.breaker_opened_at IS NULL
                THEN {NOW} + %(lease_seconds)s * interval '1 second' END,
           {NOW}, %(traceparent)s
    FROM s, plant
    RETURNING *
)
SELECT {JOB_COLUMNS} FROM d JOIN s ON s.id = d.subscription_id ORDER BY s.id
"""
"""The plant and one pending delivery per subscription that hears about it."""

CLAIM = """
SELECT * FROM plantstore_claim(
    %(room_ids)s::int[], %(rooms)s::int[], %(owner_keys)s::int[], %(owner_rooms)s::int[],
    %(receiver_room)s, %(owner_room)s, %(limit)s, %(due_by)s::timestamp,
    %(cooldown)s, %(lease_seconds)s)
"""
"""Lease up to ``limit`` deliveries due (by ``due_by``, or now), fairly: a few per subscription
(``receiver_room``, or its entry in ``room_ids``/``rooms``), taking turns
between owners (operators' subscriptions are owner 0), each owner at most
``owner_room`` (or its entry in ``owner_keys``/``owner_rooms``)."""

RECORD_OUTCOMES = """
SELECT * FROM plantstore_record_outcomes(
    %(ids)s::int[], %(leases)s::int[], %(statuses)s::text[], %(last_errors)s::text[],
    %(errors)s::text[], %(retry_in)s::float8[], %(started_at)s::timestamp[],
    %(status_codes)s::int[], %(durations)s::int[], %(receiver_ids)s::int[],
    %(closed)s::bool[], %(failures)s::int[], %(succeeded)s::bool[],
    %(threshold)s, %(cooldown)s)
"""
"""Write a batch of outcomes: each delivery moved on (under its lease),
each attempt logged, each receiver's breaker and last success updated."""
