-- plantstore_claim_v2: lease the deliveries a claim's shares name.
-- Frozen once migration 0010 created it: a change is a new version (a new file).
--
-- _subscription_ids/_shares: how many deliveries of each subscription to
-- take (decided by webhooks/engine/rules.py fair_shares). Each subscription's
-- share is taken most overdue first, skipping rows another claim holds
-- (never waiting for them: the next due rows take their place). A
-- subscription whose breaker is open is leased only if this claim reserves
-- its next probe (one claim gets it). Ids come back as bigint, before and
-- after the columns become bigint (migration 0013).
CREATE FUNCTION plantstore_claim_v2(
    _subscription_ids int[], _shares int[], _due_by timestamp,
    _cooldown float8, _lease_seconds float8)
RETURNS TABLE (delivery_id bigint, message_id varchar, payload text, attempts int,
               lease int, traceparent text, subscription_id int, owner_id int, url text,
               bearer_token text, secret varchar, retired_secrets text, breaker_open bool)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH share (subscription_id, taken) AS (
    SELECT * FROM unnest(_subscription_ids, _shares)
), locked AS (
    SELECT mine.id, share.subscription_id FROM share
    CROSS JOIN LATERAL (
        SELECT d.id FROM delivery d
        WHERE d.subscription_id = share.subscription_id AND d.status = 'pending'
          AND d.next_attempt_at <= coalesce(_due_by, (now() AT TIME ZONE 'UTC'))
          AND (d.locked_until IS NULL OR d.locked_until <= (now() AT TIME ZONE 'UTC'))
        ORDER BY d.next_attempt_at, d.id
        LIMIT share.taken
        FOR UPDATE SKIP LOCKED
    ) mine
), probe AS (
    UPDATE subscription s
    SET breaker_probe_at = (now() AT TIME ZONE 'UTC') + _cooldown * interval '1 second'
    WHERE s.id IN (SELECT subscription_id FROM locked)
      AND s.breaker_opened_at IS NOT NULL
      AND s.breaker_probe_at <= (now() AT TIME ZONE 'UTC')
    RETURNING s.id
)
UPDATE delivery d
SET lease = d.lease + 1,
    locked_until = (now() AT TIME ZONE 'UTC') + _lease_seconds * interval '1 second'
FROM subscription s
WHERE d.id = ANY(ARRAY(SELECT id FROM locked))
  AND s.id = d.subscription_id AND s.is_active
  AND (s.breaker_opened_at IS NULL OR s.id IN (SELECT id FROM probe))
RETURNING d.id::bigint, d.message_id, d.payload, d.attempts, d.lease, d.traceparent,
          s.id, s.owner_id, s.url, s.bearer_token, s.secret, s.retired_secrets,
          s.breaker_opened_at IS NOT NULL;
END
$$;
