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

from ..auth import VALID_TOKEN
from ..clock import POSTGRES_NOW as NOW
from .audience import HEARING_ABOUT

JOB_COLUMNS = ("d.id, d.message_id, d.payload, d.attempts, d.lease, d.traceparent, "
               "s.id, s.owner_id, s.url, s.bearer_token, s.secret, s.retired_secrets, "
               "s.breaker_opened_at IS NOT NULL")

WRITER = f"""writer AS (  -- the plant's owner: the user of the presented token when it
                        -- is valid now with the scope, else the owner given
    SELECT t.user_id AS id FROM {VALID_TOKEN.format(digest="%(token_digest)s", now=NOW)}
    AND %(scope)s = ANY(string_to_array(t.scopes, ' '))
    UNION ALL SELECT %(owner)s WHERE %(token_digest)s IS NULL
)"""
"""A CTE: the one row of the plant's owner, or none (the token is not valid:
nothing is written). ``token_digest`` None: ``owner`` is taken as given."""

KEY_LOCK = ("('x' || left(encode(sha256(convert_to("
            "'idempotency-key ' || {user} || ' ' || {key}, 'UTF8')), 'hex'), 16))::bit(64)::bigint")
"""SQL: the advisory lock (a signed 64-bit number) of user ``{user}``'s
idempotency key ``{key}``. Two keys whose numbers collide (a chance in
2**64) only cost each other a 409 while both are in progress."""


def _plant_with_deliveries(claimed=""):
    """CTEs ``plant`` (inserted for the ``writer``, if ``claimed`` has a row
    when given) and ``s``, ``d``: the subscriptions that hear about it and
    its deliveries."""
    return f"""plant AS (
    INSERT INTO plant (id, owner_id, name, tag, created_at)
    SELECT %(id)s, writer.id, %(name)s, %(tag)s, {NOW} FROM writer{claimed}
    RETURNING id
), s AS (  -- the active subscriptions that hear about a plant of this owner
    SELECT s.* FROM {HEARING_ABOUT.format(owner="(SELECT id FROM writer)")}
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
)"""


JOBS = f"""(SELECT {JOB_COLUMNS} FROM d JOIN s ON s.id = d.subscription_id)
    AS job (delivery_id, message_id, payload, attempts, lease, traceparent, subscription_id,
            owner_id, url, bearer_token, secret, retired_secrets, breaker_open)"""
"""The rows of the deliveries ``_plant_with_deliveries`` wrote, as ``JOB_COLUMNS``."""

STORE_PLANT_WITH_DELIVERIES = f"""
WITH {WRITER}, {_plant_with_deliveries()}
SELECT writer.id, job.* FROM writer LEFT JOIN {JOBS} ON true ORDER BY job.subscription_id
"""
"""The plant and one pending delivery per subscription that hears about it.
Rows: the owner's id, then each job's columns (all null when there is
none); no row if the token is not valid (and nothing written)."""

KEY_COLUMNS = 7
"""The columns after a job's in the rows of ``STORE_KEYED_PLANT_WITH_DELIVERIES``."""

STORE_KEYED_PLANT_WITH_DELIVERIES = f"""
WITH {WRITER}, key_lock AS (  -- the key's advisory lock, tried (never waited for)
    SELECT pg_try_advisory_xact_lock({KEY_LOCK.format(user="writer.id", key="%(key)s")})
           AS held
    FROM writer
), claimed AS (  -- the key's row with its answer: new, or over one expired or unanswered
    INSERT INTO idempotency_key (user_id, key, fingerprint, status, content_type, body,
                                 created_at, expires_at)
    SELECT writer.id, %(key)s, %(fingerprint)s, %(status)s, %(content_type)s, %(body)s,
           {NOW}, {NOW} + %(ttl_seconds)s * interval '1 second'
    FROM writer, key_lock WHERE held
    ON CONFLICT (user_id, key) DO UPDATE
    SET fingerprint = EXCLUDED.fingerprint, status = EXCLUDED.status,
        content_type = EXCLUDED.content_type, body = EXCLUDED.body,
        created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
    WHERE idempotency_key.expires_at <= {NOW} OR idempotency_key.status IS NULL
    RETURNING id
), {_plant_with_deliveries(", claimed")}
SELECT writer.id, job.*, c.id IS NOT NULL, l.held, k.fingerprint, k.status, k.content_type,
       k.body, k.expires_at <= {NOW}
FROM writer
JOIN key_lock l ON true
LEFT JOIN claimed c ON true
LEFT JOIN idempotency_key k ON c.id IS NULL AND k.user_id = writer.id AND k.key = %(key)s
LEFT JOIN {JOBS} ON true
ORDER BY job.subscription_id
"""
"""``STORE_PLANT_WITH_DELIVERIES`` for a request with an ``Idempotency-Key``
(see ``idempotency``): the key claimed, its answer stored, the plant and its
deliveries written, all or nothing. Rows: the owner's id, each job's
columns, then ``KEY_COLUMNS``: whether the key was claimed (nothing is
written otherwise), whether its lock was free, and the key's committed row
as it was found (fingerprint, status, content type, body, expired)."""

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
