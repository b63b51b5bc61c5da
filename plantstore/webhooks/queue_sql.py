"""The delivery queue's PostgreSQL statements, one per operation.

Each is a single statement, so in autocommit it is its own transaction and
costs one round trip; every time in them is the database's (``now()``), so
hosts whose clocks disagree still agree on leases and due times. SQLite runs
the same operations as plain peewee queries in a transaction (see
``queue.py``).

The busiest statements call PL/pgSQL functions: the claim and the outcome
batch, which a worker runs hundreds of times a second (migration 0008),
and a create's store (migration 0009). A function keeps its statement's
plan for the session, where planning the statement on every call took
longer than running it. Change them with a migration that replaces the
function.

Rows come back as ``JOB_COLUMNS`` (see ``queue.Job``).
"""

JOB_COLUMNS = ("d.id, d.message_id, d.payload, d.attempts, d.lease, d.traceparent, "
               "s.id, s.owner_id, s.url, s.bearer_token, s.secret, s.retired_secrets, "
               "s.breaker_opened_at IS NOT NULL")

STORE_PLANT_WITH_DELIVERIES = """
SELECT * FROM plantstore_store_plant(
    %(id)s, %(owner)s, %(name)s, %(tag)s, %(event)s, %(payload)s, %(traceparent)s,
    %(lease_seconds)s, %(token_digest)s, %(scope)s)
"""
"""The plant and one pending delivery per subscription that hears about it.
Its owner: the user of the token of digest ``token_digest`` if that token
is valid now with ``scope`` (as ``auth.find_caller`` judges), else ``owner``
when no digest is given. Rows: the owner's id, then each job's columns
(all null when there is none); no row if the token is not valid (and
nothing written)."""

KEY_COLUMNS = 7
"""The columns after a job's in the rows of ``STORE_KEYED_PLANT_WITH_DELIVERIES``."""

STORE_KEYED_PLANT_WITH_DELIVERIES = """
SELECT * FROM plantstore_store_keyed_plant(
    %(id)s, %(owner)s, %(name)s, %(tag)s, %(event)s, %(payload)s, %(traceparent)s,
    %(lease_seconds)s, %(token_digest)s, %(scope)s,
    %(key)s, %(fingerprint)s, %(status)s, %(content_type)s, %(body)s, %(ttl_seconds)s)
"""
"""``STORE_PLANT_WITH_DELIVERIES`` for a request with an ``Idempotency-Key``
(see ``idempotency``): the key claimed (its advisory lock
``plantstore_idempotency_key_lock(user, key)`` tried, never waited for), its
answer stored, the plant and its deliveries written, all or nothing. Rows:
the owner's id, each job's columns, then ``KEY_COLUMNS``: whether the key
was claimed (nothing is written otherwise), whether its lock was free, and
the key's committed row as it was found (fingerprint, status, content type,
body, expired)."""

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
