-- A create's one statement on PostgreSQL (plants/create.py): the versioned
-- functions of migration 0010 (migrations/functions/). Rows are read by
-- column name.

-- name: store_plant
SELECT * FROM plantstore_store_plant_v2(
    %(id)s, %(owner)s, %(name)s, %(tag)s, %(event)s, %(payload)s, %(traceparent)s,
    %(lease_seconds)s, %(token_digest)s, %(scope)s)

-- name: store_keyed_plant
SELECT * FROM plantstore_store_keyed_plant_v2(
    %(id)s, %(owner)s, %(name)s, %(tag)s, %(event)s, %(payload)s, %(traceparent)s,
    %(lease_seconds)s, %(token_digest)s, %(scope)s,
    %(key)s, %(fingerprint)s, %(status)s, %(content_type)s, %(body)s, %(ttl_seconds)s)
