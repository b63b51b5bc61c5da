-- The SQLite delivery store's queries (webhooks/engine/store/sqlite.py). One host:
-- its clock is the database's, so times are passed in (:now, :until, ...)
-- from the process (plantstore/db/clock.py). Lists are passed as JSON arrays
-- (json_each). Parameters are :name (db/named_sql.py); rows are read by column name.

-- --- the due rule, written once: the parts the claim's statements include ----------

-- part: due
-- A delivery (d) is due, and a claim may take it: pending, its next attempt's
-- time come by :due_by, no sender holding it (its lease unset or run out by :now).
-- The statements including it read through the index delivery_due_per_subscription.
d.status = 'pending' AND d.next_attempt_at <= :due_by
AND (d.locked_until IS NULL OR d.locked_until <= :now)

-- part: subscription_due
-- A claim may take a subscription's (s) due deliveries: it is active, and its
-- breaker closed or its next probe due by :now.
s.is_active AND (s.breaker_opened_at IS NULL OR s.breaker_probe_at <= :now)

-- name: active_subscriptions
-- The subscriptions a claim may take from.
SELECT s.id AS subscription_id, coalesce(s.owner_id, 0) AS owner_key,
       s.breaker_opened_at IS NOT NULL AS breaker_open
FROM subscription s
WHERE {subscription_due}

-- name: due_of_subscription
-- One subscription's due deliveries, most overdue first, at most :most.
SELECT d.id AS delivery_id, d.next_attempt_at FROM delivery d
WHERE d.subscription_id = :subscription_id AND {due}
ORDER BY d.next_attempt_at, d.id LIMIT :most

-- name: oldest_due
-- When the oldest delivery a claim could take now (:due_by, :now) fell due
-- (an open breaker's only once its probe is due); no row when none is.
SELECT d.next_attempt_at FROM delivery d JOIN subscription s ON s.id = d.subscription_id
WHERE {due} AND {subscription_due}
ORDER BY d.next_attempt_at LIMIT 1

-- name: take_probe
-- Reserve an open breaker's next probe; a row changed: this claim has it.
UPDATE subscription SET breaker_probe_at = :next_probe
WHERE id = :subscription_id AND breaker_opened_at IS NOT NULL AND breaker_probe_at <= :now

-- name: lease_share
-- :taken of one subscription's due deliveries, most overdue first, leased.
UPDATE delivery SET lease = lease + 1, locked_until = :until
WHERE id IN (
    SELECT d.id FROM delivery d
    WHERE d.subscription_id = :subscription_id AND {due}
    ORDER BY d.next_attempt_at, d.id LIMIT :taken)
RETURNING id AS delivery_id

-- name: jobs_of
SELECT * FROM plantstore_job WHERE delivery_id IN (SELECT value FROM json_each(:ids))
ORDER BY delivery_id

-- name: insert_plant
-- A create's plant; its deliveries follow (audience, insert_delivery) in the
-- same transaction.
INSERT INTO plant (id, owner_id, name, tag, created_at)
VALUES (:id, :owner, :name, :tag, :now)

-- name: audience
-- Who hears about a new plant of :owner (webhooks/subscriptions/audience.py):
-- the active subscriptions of operators (no owner), of :owner, and of admins.
SELECT s.id AS subscription_id, s.breaker_opened_at IS NOT NULL AS breaker_open
FROM subscription s LEFT JOIN "user" u ON u.id = s.owner_id
WHERE s.is_active AND (s.owner_id IS NULL OR s.owner_id = :owner OR u.is_admin)
ORDER BY s.id

-- name: insert_delivery
INSERT INTO delivery (subscription_id, message_id, event_type, payload, status, attempts,
                      lease, next_attempt_at, locked_until, created_at, traceparent)
VALUES (:subscription_id, :message_id, :event_type, :payload, 'pending', 0, 1, :now,
        :until, :now, :traceparent)

-- name: breaker_states
SELECT id AS subscription_id, failure_streak, breaker_opened_at IS NOT NULL AS breaker_open
FROM subscription WHERE id IN (SELECT value FROM json_each(:ids))

-- name: move_on
-- A batch's outcomes (a JSON array of objects), each written only under the
-- lease its sender held; the (id, lease) of those written.
UPDATE delivery SET status = o.value ->> 'status', attempts = attempts + 1,
    last_error = o.value ->> 'last_error', locked_until = NULL,
    delivered_at = o.value ->> 'delivered_at',
    next_attempt_at = coalesce(o.value ->> 'next_attempt_at', next_attempt_at)
FROM json_each(:outcomes) AS o
WHERE delivery.id = o.value ->> 'delivery_id' AND delivery.lease = o.value ->> 'lease'
RETURNING delivery.id AS delivery_id, delivery.lease

-- name: log_attempts
-- The attempts of a batch's written outcomes (a JSON array of objects).
INSERT INTO attempt (delivery_id, started_at, status_code, error, duration_ms, response_body)
SELECT value ->> 'delivery_id', value ->> 'started_at', value ->> 'status_code',
       value ->> 'error', value ->> 'duration_ms', value ->> 'response_body'
FROM json_each(:attempts)

-- name: move_breaker
-- A subscription's rules.BreakerMove, written as it is.
UPDATE subscription SET failure_streak = :streak,
    breaker_opened_at = CASE :opened WHEN 'now' THEN :now WHEN 'clear' THEN NULL
                                     ELSE breaker_opened_at END,
    breaker_probe_at = CASE :probe WHEN 'later' THEN :next_probe WHEN 'clear' THEN NULL
                                   ELSE breaker_probe_at END,
    last_success_at = CASE WHEN :succeeded THEN :now ELSE last_success_at END
WHERE id = :subscription_id

-- name: sending_settings
SELECT id AS subscription_id, url, bearer_token, secret, retired_secrets, is_active,
       rate_limit
FROM subscription WHERE id IN (SELECT value FROM json_each(:ids))

-- name: still_there
SELECT id AS delivery_id FROM delivery WHERE id IN (SELECT value FROM json_each(:ids))

-- name: give_back
UPDATE delivery SET locked_until = NULL
WHERE id = :delivery_id AND lease = :lease AND locked_until IS NOT NULL

-- name: take_for_resend
UPDATE delivery SET status = 'pending', attempts = 0, next_attempt_at = :now,
    lease = lease + 1, locked_until = :until
WHERE id = :id AND status <> 'delivered' AND (locked_until IS NULL OR locked_until <= :now)
RETURNING id AS delivery_id

-- name: stop_subscription
UPDATE subscription SET is_active = 0, disabled_reason = :reason, disabled_at = :now
WHERE id = :id

-- name: stop_failing_subscription
UPDATE subscription SET is_active = 0, disabled_reason = :reason, disabled_at = :now
WHERE id = :id AND is_active AND coalesce(enabled_at, created_at) < :cutoff
  AND (last_success_at IS NULL OR last_success_at < :cutoff)
RETURNING id

-- name: fail_waiting
UPDATE delivery SET status = 'failed', locked_until = NULL, lease = lease + 1,
    last_error = :last_error
WHERE subscription_id = :id AND status = 'pending'

-- name: disabled_with_waiting
-- Disabled subscriptions with deliveries still pending (on PostgreSQL a
-- create can store them while its subscription is being disabled; here
-- writers take turns, so none should be found).
SELECT s.id AS subscription_id FROM subscription s
WHERE NOT s.is_active AND EXISTS (
    SELECT 1 FROM delivery d WHERE d.subscription_id = s.id AND d.status = 'pending')
ORDER BY s.id LIMIT :limit

-- name: disabled_reason
SELECT disabled_reason FROM subscription WHERE id = :id AND NOT is_active

-- name: delete_attempts_of_subscription
DELETE FROM attempt
WHERE delivery_id IN (SELECT id FROM delivery WHERE subscription_id = :id)

-- name: delete_deliveries_of_subscription
DELETE FROM delivery WHERE subscription_id = :id

-- name: delete_subscription
DELETE FROM subscription WHERE id = :id

-- name: recover
UPDATE delivery SET status = 'pending', attempts = 0, lease = lease + 1,
    next_attempt_at = :now, locked_until = NULL
WHERE subscription_id = :id AND status = 'failed' AND created_at >= :since

-- name: enable
UPDATE subscription SET is_active = 1, disabled_reason = NULL, disabled_at = NULL,
    enabled_at = :now, failure_streak = 0, breaker_opened_at = NULL, breaker_probe_at = NULL
WHERE id = :id

-- name: finished_before
SELECT id FROM delivery
WHERE status IN ('delivered', 'failed') AND created_at < :cutoff ORDER BY id LIMIT :limit

-- name: purge_attempts
DELETE FROM attempt WHERE delivery_id IN (SELECT value FROM json_each(:ids))

-- name: purge_deliveries
DELETE FROM delivery
WHERE id IN (SELECT value FROM json_each(:ids)) AND status IN ('delivered', 'failed')
  AND created_at < :cutoff

-- --- the throttle (webhooks/engine/throttle.py) ------------------------------------
-- The bucket's arithmetic is webhooks/engine/rules.py's, in the store: these only
-- read and write buckets.

-- name: throttle_due_subscriptions
-- The throttled subscriptions a claim may take from that have due deliveries.
SELECT s.id AS subscription_id, s.breaker_opened_at IS NOT NULL AS breaker_open
FROM subscription s
WHERE s.rate_limit IS NOT NULL AND {subscription_due}
  AND EXISTS (SELECT 1 FROM delivery d WHERE d.subscription_id = s.id AND {due})

-- name: throttle_buckets
-- The buckets of those of :ids that are throttled.
SELECT id AS subscription_id, rate_limit, throttle_tokens, throttle_refilled_at
FROM subscription
WHERE id IN (SELECT value FROM json_each(:ids)) AND rate_limit IS NOT NULL

-- name: throttle_spend
UPDATE subscription SET throttle_tokens = :tokens, throttle_refilled_at = :refilled_at
WHERE id = :subscription_id

-- name: throttle_put_back
UPDATE subscription SET throttle_tokens = :tokens WHERE id = :subscription_id
