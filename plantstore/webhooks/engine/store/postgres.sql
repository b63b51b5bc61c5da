-- The PostgreSQL delivery store's queries (webhooks/engine/store/postgres.py).
-- Every time is the database's ({now}: now() in UTC, stored naive), so hosts
-- whose clocks disagree still agree on leases and due times. Parameters are
-- :name (db/named_sql.py); rows are read by column name.

-- name: store_plant
-- A create's one statement, its fast path: the token checked, the plant and
-- one delivery per subscription that hears about it (plantstore_audience_v1),
-- their plantstore_job rows back (see the function's file).
SELECT * FROM plantstore_store_plant_v3(
    :id, :owner, :name, :tag, :event, :payload, :traceparent,
    :lease_seconds, :token_digest, :scope)

-- name: store_keyed_plant
-- The same with an Idempotency-Key claimed (see the function's file).
SELECT * FROM plantstore_store_keyed_plant_v3(
    :id, :owner, :name, :tag, :event, :payload, :traceparent,
    :lease_seconds, :token_digest, :scope,
    :key, :fingerprint, :status, :content_type, :body, :ttl_seconds)

-- name: due_candidates
-- What rules.fair_shares chooses from (see the function's file).
SELECT * FROM plantstore_due_candidates_v3(:most, :due_by::timestamp)

-- name: oldest_due_age
-- Seconds the oldest delivery a claim could take now has waited (an open
-- breaker's only once its probe is due); 0 when none is. The due rule is
-- migration 0018's two functions, as in the claim's (inlined by the planner).
SELECT coalesce(extract(epoch FROM {now} - (
    SELECT d.next_attempt_at FROM delivery d JOIN subscription s ON s.id = d.subscription_id
    WHERE plantstore_delivery_due_v1(d.status, d.next_attempt_at, d.locked_until, NULL)
      AND plantstore_subscription_due_v1(s.is_active, s.breaker_opened_at, s.breaker_probe_at)
    ORDER BY d.next_attempt_at LIMIT 1)), 0) AS age_seconds

-- name: claim
SELECT * FROM plantstore_claim_v4(
    :subscription_ids::int[], :shares::int[], :due_by::timestamp,
    :cooldown, :lease_seconds)

-- name: jobs_of
SELECT * FROM plantstore_job WHERE delivery_id = ANY(:ids::bigint[]) ORDER BY delivery_id

-- name: breaker_states
-- The breakers a batch's moves depend on, locked until the batch commits,
-- in id order and before any delivery row (docs/webhooks-isolation.md, "One
-- lock order"). NO KEY UPDATE: a create's deliveries (whose foreign keys
-- take KEY SHARE on these rows) are never made to wait by it.
SELECT id AS subscription_id, failure_streak, breaker_opened_at IS NOT NULL AS breaker_open
FROM subscription WHERE id = ANY(:ids::int[])
ORDER BY id
FOR NO KEY UPDATE

-- name: record_outcomes
SELECT * FROM plantstore_record_outcomes_v3(
    :ids::bigint[], :leases::int[], :statuses::text[], :last_errors::text[],
    :errors::text[], :response_bodies::text[], :retry_in::float8[],
    :started_at::timestamp[], :status_codes::int[], :durations::int[],
    :subscription_ids::int[], :streaks::int[], :opened::text[], :probes::text[],
    :succeeded::bool[], :cooldown) AS written (delivery_id)

-- name: sending_settings
SELECT id AS subscription_id, url, bearer_token, secret, retired_secrets, is_active,
       rate_limit
FROM subscription WHERE id = ANY(:ids::int[])

-- name: still_there
SELECT id AS delivery_id FROM delivery WHERE id = ANY(:ids::bigint[])

-- name: give_back
-- The leases still held cleared: each subscription's row first (KEY SHARE,
-- in id order: only its DELETE waits for it, and it waits for the DELETE),
-- then its deliveries (the one lock order). A give-back that took delivery
-- rows first deadlocked with a DELETE cascading to the same rows.
WITH subscriptions AS MATERIALIZED (
    SELECT s.id FROM subscription s
    WHERE s.id IN (SELECT d.subscription_id FROM delivery d
                   WHERE d.id = ANY(:ids::bigint[]))
    ORDER BY s.id
    FOR KEY SHARE OF s
)
UPDATE delivery d SET locked_until = NULL
FROM unnest(:ids::bigint[], :leases::int[]) AS g (id, lease), subscriptions s
WHERE d.id = g.id AND d.lease = g.lease AND d.subscription_id = s.id
  AND d.locked_until IS NOT NULL

-- name: insert_delivery
INSERT INTO delivery (subscription_id, message_id, event_type, payload, status, attempts,
                      lease, next_attempt_at, locked_until, created_at, traceparent)
VALUES (:subscription_id, :message_id, :event_type, :payload, 'pending', 0, 1,
        {now},
        {now} + :lease_seconds::float8 * interval '1 second',
        {now}, :traceparent)
RETURNING id AS delivery_id

-- name: take_for_resend
-- Back to the start of the retry schedule, leased to the caller (a new
-- lease: an attempt still in flight writes nothing).
UPDATE delivery SET status = 'pending', attempts = 0,
    next_attempt_at = {now}, lease = lease + 1,
    locked_until = {now} + :lease_seconds * interval '1 second'
WHERE id = :id AND status <> 'delivered'
  AND (locked_until IS NULL OR locked_until <= {now})
RETURNING id AS delivery_id

-- name: stop_subscription
UPDATE subscription SET is_active = false, disabled_reason = :reason,
    disabled_at = {now}
WHERE id = :id

-- name: stop_failing_subscription
-- Stopped only if it has had no success (nor was made or enabled again)
-- within :cutoff_seconds.
UPDATE subscription SET is_active = false, disabled_reason = :reason,
    disabled_at = {now}
WHERE id = :id AND is_active
  AND coalesce(enabled_at, created_at)
      < {now} - :cutoff_seconds * interval '1 second'
  AND (last_success_at IS NULL
       OR last_success_at < {now} - :cutoff_seconds * interval '1 second')
RETURNING id

-- name: fail_waiting
-- A stopped subscription's waiting deliveries, failed under a new lease:
-- an attempt in flight can never bring one back.
UPDATE delivery SET status = 'failed', locked_until = NULL, lease = lease + 1,
    last_error = :last_error
WHERE subscription_id = :id AND status = 'pending'

-- name: disabled_with_waiting
-- Disabled subscriptions with deliveries still pending: a create that read
-- one as active while it was being disabled stored them after its waiting
-- deliveries were failed (a create's statement waits for no subscription's
-- row: the one lock order), so the worker's housekeeping fails them.
SELECT s.id AS subscription_id FROM subscription s
WHERE NOT s.is_active AND EXISTS (
    SELECT 1 FROM delivery d WHERE d.subscription_id = s.id AND d.status = 'pending')
ORDER BY s.id LIMIT :limit

-- name: lock_disabled_subscription
-- Its row, if it is still disabled, before any of its deliveries' (the one
-- lock order); an enable committed meanwhile leaves nothing to lock.
SELECT disabled_reason FROM subscription WHERE id = :id AND NOT is_active
FOR NO KEY UPDATE

-- name: delete_subscription
-- The subscription's row first, then its deliveries and their attempts by
-- the foreign keys' cascade: the one lock order (docs/webhooks-isolation.md).
DELETE FROM subscription WHERE id = :id

-- name: lock_subscription
-- Its row, before any of its deliveries' (the one lock order).
SELECT id FROM subscription WHERE id = :id FOR NO KEY UPDATE

-- name: recover
-- A subscription's failed deliveries created since :since, queued again
-- under a new lease.
UPDATE delivery SET status = 'pending', attempts = 0, lease = lease + 1,
    next_attempt_at = {now}, locked_until = NULL
WHERE subscription_id = :id AND status = 'failed' AND created_at >= :since

-- name: enable
UPDATE subscription SET is_active = true, disabled_reason = NULL, disabled_at = NULL,
    enabled_at = {now}, failure_streak = 0,
    breaker_opened_at = NULL, breaker_probe_at = NULL
WHERE id = :id

-- name: finished_before
SELECT id FROM delivery
WHERE status IN ('delivered', 'failed')
  AND created_at < {now} - :days * interval '1 day'
ORDER BY id LIMIT :limit

-- name: purge_attempts
DELETE FROM attempt WHERE delivery_id = ANY(:ids::bigint[])

-- name: purge_deliveries
DELETE FROM delivery
WHERE id = ANY(:ids::bigint[]) AND status IN ('delivered', 'failed')
  AND created_at < {now} - :days * interval '1 day'

-- --- the throttle (webhooks/engine/throttle.py): functions of migrations 0011, 0018 -

-- name: throttle_take_for_claim
-- (subscription_id, tokens) of every throttled subscription with due deliveries.
SELECT * FROM plantstore_throttle_take_for_claim_v2(
    :ids::int[], :rooms::int[], :default_room, :limit, :due_by::timestamp)

-- name: throttle_take
-- (subscription_id, tokens) of those of :ids that are throttled.
SELECT * FROM plantstore_throttle_take_v1(:ids::int[], :wants::int[])

-- name: throttle_give_back
SELECT plantstore_throttle_give_back_v1(:ids::int[], :counts::int[])
