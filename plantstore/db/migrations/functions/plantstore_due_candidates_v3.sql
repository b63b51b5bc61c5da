-- plantstore_due_candidates_v3: what a claim chooses from;
-- plantstore_due_candidates_v2 with the due rule called, not written out:
-- plantstore_subscription_due_v1 for the subscription,
-- plantstore_delivery_due_v1 for each delivery (both inlined by the planner).
-- Frozen once migration 0018 created it: a change is a new version (a new file).
--
-- The due deliveries of the subscriptions a claim may take from: at most
-- _most per subscription (one while its breaker is open), most overdue
-- first, read through the index delivery_due_per_subscription (a claim
-- costs the same however long the backlog). webhooks/engine/rules.py
-- fair_shares chooses from them; a function, so that its plan is kept for
-- the session rather than made on every claim.
CREATE FUNCTION plantstore_due_candidates_v3(_most int, _due_by timestamp)
RETURNS TABLE (subscription_id int, owner_key int, breaker_open bool)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
SELECT s.id, coalesce(s.owner_id, 0), s.breaker_opened_at IS NOT NULL
FROM subscription s
CROSS JOIN LATERAL (
    SELECT d.id, d.next_attempt_at FROM delivery d
    WHERE d.subscription_id = s.id
      AND plantstore_delivery_due_v1(d.status, d.next_attempt_at, d.locked_until, _due_by)
    ORDER BY d.next_attempt_at, d.id
    LIMIT CASE WHEN s.breaker_opened_at IS NOT NULL THEN 1 ELSE _most END
) due
WHERE plantstore_subscription_due_v1(s.is_active, s.breaker_opened_at, s.breaker_probe_at)
ORDER BY due.next_attempt_at, due.id;
END
$$;
