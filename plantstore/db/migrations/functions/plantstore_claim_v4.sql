-- plantstore_claim_v4: plantstore_claim_v3 with the due rule of each
-- delivery called (plantstore_delivery_due_v1, inlined by the planner), not
-- written out. Frozen once migration 0018 created it: a change is a new
-- version (a new file).
--
-- _subscription_ids/_shares: how many deliveries of each subscription to
-- take (decided by webhooks/engine/rules.py fair_shares). Each subscription's
-- share is taken most overdue first, skipping rows another claim holds
-- (never waiting for them: the next due rows take their place). A
-- subscription whose breaker is open is leased only if this claim reserves
-- its next probe (one claim gets it). The probes are reserved first, their
-- rows locked in id order, before any delivery row (the one lock order of
-- docs/webhooks-isolation.md). A leased row's subscription is re-checked as
-- active, its breaker closed or its probe reserved here: not
-- plantstore_subscription_due_v1, whose probe time this claim has just
-- moved on. Returns job rows of the plantstore_job view.
CREATE FUNCTION plantstore_claim_v4(
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
        WHERE d.subscription_id = share.subscription_id
          AND plantstore_delivery_due_v1(d.status, d.next_attempt_at, d.locked_until, _due_by)
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
