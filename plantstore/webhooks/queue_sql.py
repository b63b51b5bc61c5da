"""The delivery queue's PostgreSQL statements, one per operation.

Each is a single statement, so in autocommit it is its own transaction and
costs one round trip; every time in them is the database's (``now()``), so
hosts whose clocks disagree still agree on leases and due times. SQLite runs
the same operations as plain peewee queries in a transaction (see
``queue.py``).

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

CLAIM = f"""
WITH receiver_room (subscription_id, room) AS (
    SELECT * FROM unnest(%(room_ids)s::int[], %(rooms)s::int[])
), owner_room (owner_key, room) AS (
    SELECT * FROM unnest(%(owner_keys)s::int[], %(owner_rooms)s::int[])
), candidate AS (  -- the most overdue few of each subscription, at most its room
    SELECT due.id, s.id AS subscription_id, due.next_attempt_at, due.nth,
           coalesce(s.owner_id, 0) AS owner_key
    FROM subscription s
    CROSS JOIN LATERAL (
        SELECT d.id, d.next_attempt_at,
               row_number() OVER (ORDER BY d.next_attempt_at, d.id) AS nth
        FROM delivery d
        WHERE d.subscription_id = s.id AND d.status = 'pending'
          AND d.next_attempt_at <= coalesce(%(due_by)s::timestamp, {NOW})
          AND (d.locked_until IS NULL OR d.locked_until <= {NOW})
        ORDER BY d.next_attempt_at, d.id
        LIMIT CASE WHEN s.breaker_opened_at IS NOT NULL THEN 1  -- its probe
                   ELSE coalesce((SELECT room FROM receiver_room r
                                  WHERE r.subscription_id = s.id), %(receiver_room)s) END
    ) due
    WHERE s.is_active
      AND (s.breaker_opened_at IS NULL OR s.breaker_probe_at <= {NOW})
), turn AS (  -- each owner's candidates take turns with the other owners'
    SELECT c.*, row_number() OVER (PARTITION BY c.owner_key
                                   ORDER BY c.nth, c.next_attempt_at, c.id) AS owner_nth
    FROM candidate c
), share AS (  -- how many each subscription gets: the first turns, up to the limit
    SELECT subscription_id, count(*) AS taken FROM (
        SELECT t.subscription_id FROM turn t
        WHERE t.owner_nth <= coalesce((SELECT room FROM owner_room o
                                       WHERE o.owner_key = t.owner_key), %(owner_room)s)
        ORDER BY t.owner_nth, t.next_attempt_at, t.id
        LIMIT %(limit)s) first_turns
    GROUP BY subscription_id
), locked AS (  -- each subscription's share, most overdue first, skipping rows
                -- another claim holds (never waiting for them): the next due
                -- rows take their place
    SELECT mine.id, share.subscription_id FROM share
    CROSS JOIN LATERAL (
        SELECT d.id FROM delivery d
        WHERE d.subscription_id = share.subscription_id AND d.status = 'pending'
          AND d.next_attempt_at <= coalesce(%(due_by)s::timestamp, {NOW})
          AND (d.locked_until IS NULL OR d.locked_until <= {NOW})
        ORDER BY d.next_attempt_at, d.id
        LIMIT share.taken
        FOR UPDATE SKIP LOCKED
    ) mine
), probe AS (  -- an open breaker's next probe, taken by one claim only
    UPDATE subscription s
    SET breaker_probe_at = {NOW} + %(cooldown)s * interval '1 second'
    WHERE s.id IN (SELECT subscription_id FROM locked)
      AND s.breaker_opened_at IS NOT NULL AND s.breaker_probe_at <= {NOW}
    RETURNING s.id
)
UPDATE delivery d
SET lease = d.lease + 1, locked_until = {NOW} + %(lease_seconds)s * interval '1 second'
FROM subscription s
WHERE d.id = ANY(ARRAY(SELECT id FROM locked))  -- by its key, however many are due
  AND s.id = d.subscription_id
  AND (s.breaker_opened_at IS NULL OR s.id IN (SELECT id FROM probe))
RETURNING {JOB_COLUMNS}
"""
"""Lease up to ``limit`` deliveries due (by ``due_by``, or now), fairly: a few per subscription
(``receiver_room``, or its entry in ``room_ids``/``rooms``), taking turns
between owners (operators' subscriptions are owner 0), each owner at most
``owner_room`` (or its entry in ``owner_keys``/``owner_rooms``)."""

RECORD_OUTCOMES = f"""
WITH outcome (id, lease, status, last_error, error, retry_in, started_at, status_code,
              duration_ms) AS (
    SELECT * FROM unnest(%(ids)s::int[], %(leases)s::int[], %(statuses)s::text[],
                         %(last_errors)s::text[], %(errors)s::text[], %(retry_in)s::float8[],
                         %(started_at)s::timestamp[], %(status_codes)s::int[],
                         %(durations)s::int[])
), written AS (  -- only under the lease its sender held
    UPDATE delivery d
    SET status = o.status, attempts = d.attempts + 1, last_error = o.last_error,
        locked_until = NULL,
        next_attempt_at = coalesce({NOW} + o.retry_in * interval '1 second',
                                   d.next_attempt_at),
        delivered_at = CASE WHEN o.status = 'delivered' THEN {NOW} END
    FROM outcome o
    WHERE d.id = o.id AND d.lease = o.lease
    RETURNING d.id
), logged AS (
    INSERT INTO attempt (delivery_id, started_at, status_code, error, duration_ms)
    SELECT o.id, o.started_at, o.status_code, o.error, o.duration_ms
    FROM outcome o JOIN written USING (id)
), receiver (id, closed, failures, succeeded) AS (
    SELECT * FROM unnest(%(receiver_ids)s::int[], %(closed)s::bool[],
                         %(failures)s::int[], %(succeeded)s::bool[])
), streak AS (
    SELECT r.*, CASE WHEN r.closed THEN r.failures
                     ELSE s.failure_streak + r.failures END AS streak
    FROM receiver r JOIN subscription s USING (id)
), breaker AS (  -- the rules of breaker.py
    UPDATE subscription s
    SET failure_streak = t.streak,
        breaker_opened_at = CASE
            WHEN t.streak >= %(threshold)s AND (t.closed OR s.breaker_opened_at IS NULL)
                THEN {NOW}
            WHEN t.closed THEN NULL
            ELSE s.breaker_opened_at END,
        breaker_probe_at = CASE
            WHEN t.streak >= %(threshold)s
                THEN {NOW} + %(cooldown)s * interval '1 second'
            WHEN t.closed THEN NULL
            ELSE s.breaker_probe_at END,
        last_success_at = CASE WHEN t.succeeded THEN {NOW} ELSE s.last_success_at END
    FROM streak t
    WHERE s.id = t.id AND (t.closed OR t.failures > 0 OR t.succeeded)
)
SELECT id FROM written
"""
"""Write a batch of outcomes: each delivery moved on (under its lease),
each attempt logged, each receiver's breaker and last success updated."""
