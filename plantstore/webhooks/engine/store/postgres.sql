-- The PostgreSQL delivery store's queries (webhooks/engine/store/postgres.py).
-- Every time is the database's (now() in UTC, stored naive), so hosts whose
-- clocks disagree still agree on leases and due times. Parameters are
-- psycopg2's %(name)s; rows are read by column name.

-- name: store_plant
-- A create's one statement, its fast path: the token checked, the plant and
-- one delivery per subscription that hears about it (plantstore_audience_v1),
-- their plantstore_job rows back (see the function's file).
SELECT * FROM plantstore_store_plant_v3(
    %(id)s, %(owner)s, %(name)s, %(tag)s, %(event)s, %(payload)s, %(traceparent)s,
    %(lease_seconds)s, %(token_digest)s, %(scope)s)

-- name: store_keyed_plant
-- The same with an Idempotency-Key claimed (see the function's file).
SELECT * FROM plantstore_store_keyed_plant_v3(
    %(id)s, %(owner)s, %(name)s, %(tag)s, %(event)s, %(payload)s, %(traceparent)s,
    %(lease_seconds)s, %(token_digest)s, %(scope)s,
    %(key)s, %(fingerprint)s, %(status)s, %(content_type)s, %(body)s, %(ttl_seconds)s)

-- name: due_candidates
-- What rules.fair_shares chooses from (see the function's file).
SELECT * FROM plantstore_due_candidates_v2(%(most)s, %(due_by)s::timestamp)

-- name: oldest_due_age
-- Seconds the oldest due, unleased delivery a claim could take now has
-- waited (an open breaker's only once its probe is due); 0 when none is.
SELECT coalesce(extract(epoch FROM (now() AT TIME ZONE 'UTC') - (
    SELECT d.next_attempt_at FROM delivery d JOIN subscription s ON s.id = d.subscription_id
    WHERE d.status = 'pending' AND s.is_active
      AND d.next_attempt_at <= (now() AT TIME ZONE 'UTC')
      AND (d.locked_until IS NULL OR d.locked_until <= (now() AT TIME ZONE 'UTC'))
      AND (s.breaker_opened_at IS NULL OR s.breaker_probe_at <= (now() AT TIME ZONE 'UTC'))
    ORDER BY d.next_attempt_at LIMIT 1)), 0) AS age_seconds

-- name: claim
SELECT * FROM plantstore_claim_v3(
    %(subscription_ids)s::int[], %(shares)s::int[], %(due_by)s::timestamp,
    %(cooldown)s, %(lease_seconds)s)

-- name: jobs_of
SELECT * FROM plantstore_job WHERE delivery_id = ANY(%(ids)s::bigint[]) ORDER BY delivery_id

-- name: breaker_states
-- The breakers a batch's moves depend on, locked until the batch commits,
-- in id order and before any delivery row (docs/webhooks-isolation.md, "One
-- lock order"). NO KEY UPDATE: a create's deliveries (whose foreign keys
-- take KEY SHARE on these rows) are never made to wait by it.
SELECT id AS subscription_id, failure_streak, breaker_opened_at IS NOT NULL AS breaker_open
FROM subscription WHERE id = ANY(%(ids)s::int[])
ORDER BY id
FOR NO KEY UPDATE

-- name: record_outcomes
SELECT * FROM plantstore_record_outcomes_v3(
    %(ids)s::bigint[], %(leases)s::int[], %(statuses)s::text[], %(last_errors)s::text[],
    %(errors)s::text[], %(response_bodies)s::text[], %(retry_in)s::float8[],
    %(started_at)s::timestamp[], %(status_codes)s::int[], %(durations)s::int[],
    %(subscription_ids)s::int[], %(streaks)s::int[], %(opened)s::text[], %(probes)s::text[],
    %(succeeded)s::bool[], %(cooldown)s) AS written (delivery_id)

-- name: sending_settings
SELECT id AS subscription_id, url, bearer_token, secret, retired_secrets, is_active,
       rate_limit
FROM subscription WHERE id = ANY(%(ids)s::int[])

-- name: still_there
SELECT id AS delivery_id FROM delivery WHERE id = ANY(%(ids)s::bigint[])

-- name: give_back
-- The leases still held cleared: each subscription's row first (KEY SHARE,
-- in id order: only its DELETE waits for it, and it waits for the DELETE),
-- then its deliveries (the one lock order). A give-back that took delivery
-- rows first deadlocked with a DELETE cascading to the same rows.
WITH subscriptions AS MATERIALIZED (
    SELECT s.id FROM subscription s
    WHERE s.id IN (SELECT d.subscription_id FROM delivery d
                   WHERE d.id = ANY(%(ids)s::bigint[]))
    ORDER BY s.id
    FOR KEY SHARE OF s
)
UPDATE delivery d SET locked_until = NULL
FROM unnest(%(ids)s::bigint[], %(leases)s::int[]) AS g (id, lease), subscriptions s
WHERE d.id = g.id AND d.lease = g.lease AND d.subscription_id = s.id
  AND d.locked_until IS NOT NULL

-- name: insert_delivery
INSERT INTO delivery (subscription_id, message_id, event_type, payload, status, attempts,
                      lease, next_attempt_at, locked_until, created_at, traceparent)
VALUES (%(subscription_id)s, %(message_id)s, %(event_type)s, %(payload)s, 'pending', 0, 1,
        (now() AT TIME ZONE 'UTC'),
        (now() AT TIME ZONE 'UTC') + %(lease_seconds)s::float8 * interval '1 second',
        (now() AT TIME ZONE 'UTC'), %(traceparent)s)
RETURNING id AS delivery_id

-- name: take_for_resend
-- Back to the start of the retry schedule, leased to the caller (a new
-- lease: an attempt still in flight writes nothing).
UPDATE delivery SET status = 'pending', attempts = 0,
    next_attempt_at = (now() AT TIME ZONE 'UTC'), lease = lease + 1,
    locked_until = (now() AT TIME ZONE 'UTC') + %(lease_seconds)s * interval '1 second'
WHERE id = %(id)s AND status <> 'delivered'
  AND (locked_until IS NULL OR locked_until <= (now() AT TIME ZONE 'UTC'))
RETURNING id AS delivery_id

-- name: stop_subscription
UPDATE subscription SET is_active = false, disabled_reason = %(reason)s,
    disabled_at = (now() AT TIME ZONE 'UTC')
WHERE id = %(id)s

-- name: stop_failing_subscription
-- Stopped only if it has had no success (nor was made or enabled again)
-- within %(cutoff_seconds)s.
UPDATE subscription SET is_active = false, disabled_reason = %(reason)s,
    disabled_at = (now() AT TIME ZONE 'UTC')
WHERE id = %(id)s AND is_active
  AND coalesce(enabled_at, created_at)
      < (now() AT TIME ZONE 'UTC') - %(cutoff_seconds)s * interval '1 second'
  AND (last_success_at IS NULL
       OR last_success_at < (now() AT TIME ZONE 'UTC') - %(cutoff_seconds)s * interval '1 second')
RETURNING id

-- name: fail_waiting
-- A stopped subscription's waiting deliveries, failed under a new lease:
-- an attempt in flight can never bring one back.
UPDATE delivery SET status = 'failed', locked_until = NULL, lease = lease + 1,
    last_error = %(last_error)s
WHERE subscription_id = %(id)s AND status = 'pending'

-- name: disabled_with_waiting
-- Disabled subscriptions with deliveries still pending: a create that read
-- one as active while it was being disabled stored them after its waiting
-- deliveries were failed (a create's statement waits for no subscription's
-- row: the one lock order), so the worker's housekeeping fails them.
SELECT s.id AS subscription_id FROM subscription s
WHERE NOT s.is_active AND EXISTS (
    SELECT 1 FROM delivery d WHERE d.subscription_id = s.id AND d.status = 'pending')
ORDER BY s.id LIMIT %(limit)s

-- name: lock_disabled_subscription
-- Its row, if it is still disabled, before any of its deliveries' (the one
-- lock order); an enable committed meanwhile leaves nothing to lock.
SELECT disabled_reason FROM subscription WHERE id = %(id)s AND NOT is_active
FOR NO KEY UPDATE

-- name: delete_subscription
-- The subscription's row first, then its deliveries and their attempts by
-- the foreign keys' cascade: the one lock order (docs/webhooks-isolation.md).
DELETE FROM subscription WHERE id = %(id)s

-- name: lock_subscription
-- Its row, before any of its deliveries' (the one lock order).
SELECT id FROM subscription WHERE id = %(id)s FOR NO KEY UPDATE

-- name: recover
-- A subscription's failed deliveries created since %(since)s, queued again
-- under a new lease.
UPDATE delivery SET status = 'pending', attempts = 0, lease = lease + 1,
    next_attempt_at = (now() AT TIME ZONE 'UTC'), locked_until = NULL
WHERE subscription_id = %(id)s AND status = 'failed' AND created_at >= %(since)s

-- name: enable
UPDATE subscription SET is_active = true, disabled_reason = NULL, disabled_at = NULL,
    enabled_at = (now() AT TIME ZONE 'UTC'), failure_streak = 0,
    breaker_opened_at = NULL, breaker_probe_at = NULL
WHERE id = %(id)s

-- name: finished_before
SELECT id FROM delivery
WHERE status IN ('delivered', 'failed')
  AND created_at < (now() AT TIME ZONE 'UTC') - %(days)s * interval '1 day'
ORDER BY id LIMIT %(limit)s

-- name: purge_attempts
DELETE FROM attempt WHERE delivery_id = ANY(%(ids)s::bigint[])

-- name: purge_deliveries
DELETE FROM delivery
WHERE id = ANY(%(ids)s::bigint[]) AND status IN ('delivered', 'failed')
  AND created_at < (now() AT TIME ZONE 'UTC') - %(days)s * interval '1 day'

-- --- the throttle (webhooks/engine/throttle.py): functions of migration 0011 --------

-- name: throttle_take_for_claim
-- (subscription_id, tokens) of every throttled subscription with due deliveries.
SELECT * FROM plantstore_throttle_take_for_claim_v1(
    %(ids)s::int[], %(rooms)s::int[], %(default_room)s, %(limit)s, %(due_by)s::timestamp)

-- name: throttle_take
-- (subscription_id, tokens) of those of %(ids)s that are throttled.
SELECT * FROM plantstore_throttle_take_v1(%(ids)s::int[], %(wants)s::int[])

-- name: throttle_give_back
SELECT plantstore_throttle_give_back_v1(%(ids)s::int[], %(counts)s::int[])
