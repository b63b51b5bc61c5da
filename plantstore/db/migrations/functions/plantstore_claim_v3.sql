-- plantstore_claim_v3: plantstore_claim_v2, returning job rows of the
-- plantstore_job view, so a field senders need is added to that view and
-- nowhere here. Frozen once migration 0014 created it: a change is a new
-- version (a new file).
--
-- _subscription_ids/_shares: how many deliveries of each subscription to
-- take (decided by webhooks/engine/rules.py fair_shares). Each subscription's
-- share is taken most overdue first, skipping rows another claim holds
-- (never waiting for them: the next due rows take their place). A
-- subscription whose breaker is open is leased only if this claim reserves
-- its next probe (one claim gets it). Unlike v2, the probes are reserved
-- first, their rows locked in id order, before any delivery row (the one
-- lock order of docs/webhooks-isolation.md): v2 locked deliveries, then
-- waited for a subscription's row that an outcome batch or a DELETE held
-- while it waited for those deliveries.
CREATE FUNCTION plantstore_claim_v3(
    _subscription_ids int[], _shares int[], _due_by timestamp,
    _cooldown float8, _lease_seconds float8)
RETURNS SETOF plantstore_job
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    _probes int[];
    _leased bigint[];
BEGIN
WITH probe AS (
    UPDATE subscription s
    SET breaker_probe_at = (now() AT TIME ZONE 'UTC') + _cooldown * interval '1 second'
    WHERE s.id IN (
        SELECT p.id FROM subscription p
        WHERE p.id = ANY(_subscription_ids)
          AND p.breaker_opened_at IS NOT NULL
          AND p.breaker_probe_at <= (now() AT TIME ZONE 'UTC')
        ORDER BY p.id
        FOR NO KEY UPDATE)
      AND s.breaker_probe_at <= (now() AT TIME ZONE 'UTC')
    RETURNING s.id
)
SELECT array_agg(id) INTO _probes FROM probe;
WITH share (subscription_id, taken) AS (
    SELECT * FROM unnest(_subscription_ids, _shares)
), locked AS (
    SELECT mine.id FROM share
    CROSS JOIN LATERAL (
        SELECT d.id FROM delivery d
        WHERE d.subscription_id = share.subscription_id AND d.status = 'pending'
          AND d.next_attempt_at <= coalesce(_due_by, (now() AT TIME ZONE 'UTC'))
          AND (d.locked_until IS NULL OR d.locked_until <= (now() AT TIME ZONE 'UTC'))
        ORDER BY d.next_attempt_at, d.id
        LIMIT share.taken
        FOR UPDATE SKIP LOCKED
    ) mine
), leased AS (
    UPDATE delivery d
    SET lease = d.lease + 1,
        locked_until = (now() AT TIME ZONE 'UTC') + _lease_seconds * interval '1 second'
    FROM subscription s
    WHERE d.id = ANY(ARRAY(SELECT id FROM locked))
      AND s.id = d.subscription_id AND s.is_active
      AND (s.breaker_opened_at IS NULL OR s.id = ANY(coalesce(_probes, '{}')))
    RETURNING d.id
)
SELECT array_agg(id) INTO _leased FROM leased;
RETURN QUERY SELECT * FROM plantstore_job j WHERE j.delivery_id = ANY(_leased);
END
$$;
