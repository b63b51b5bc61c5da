-- plantstore_subscription_due_v1: whether a claim may take a subscription's
-- due deliveries now, written once.
-- Frozen once migration 0018 created it: a change is a new version (a new file).
--
-- The subscription is active, and its breaker closed or its next probe due
-- by the database's clock (a claim then takes one delivery, the probe, and
-- only if it reserves it: plantstore_claim_v4). Inlined by the planner as
-- plantstore_delivery_due_v1 is (one SQL expression over scalar arguments).
CREATE FUNCTION plantstore_subscription_due_v1(
    _is_active bool, _breaker_opened_at timestamp, _breaker_probe_at timestamp)
RETURNS bool
LANGUAGE sql STABLE AS $$
SELECT _is_active
   AND (_breaker_opened_at IS NULL OR _breaker_probe_at <= (now() AT TIME ZONE 'UTC'))
$$;
