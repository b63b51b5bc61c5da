-- plantstore_due_candidates_v2: what a claim chooses from.
-- Frozen once migration 0010 created it: a change is a new version (a new file).
--
-- The due, unleased deliveries of active subscriptions whose breaker is
-- closed or whose probe is due: at most _most per subscription (one while
-- its breaker is open), most overdue first, read through the index
-- delivery_due_per_subscription (a claim costs the same however long the
-- backlog). webhooks/engine/rules.py fair_shares chooses from them; a function, so
-- that its plan is kept for the session rather than made on every claim.
CREATE FUNCTION plantstore_due_candidates_v2(_most int, _due_by timestamp)
RETURNS TABLE (subscription_id int, owner_key int, breaker_open bool)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
SELECT s.id, coalesce(s.owner_id, 0), s.breaker_opened_at IS NOT NULL
FROM subscription s
CROSS JOIN LATERAL (
    SELECT d.id, d.next_attempt_at FROM delivery d
    WHERE d.subscription_id = s.id AND d.status = 'pending'
      AND d.next_attempt_at <= coalesce(_due_by, (now() AT TIME ZONE 'UTC'))
      AND (d.locked_until IS NULL OR d.locked_until <= (now() AT TIME ZONE 'UTC'))
    ORDER BY d.next_attempt_at, d.id
    LIMIT CASE WHEN s.breaker_opened_at IS NOT NULL THEN 1 ELSE _most END
) due
WHERE s.is_active
  AND (s.breaker_opened_at IS NULL OR s.breaker_probe_at <= (now() AT TIME ZONE 'UTC'))
ORDER BY due.next_attempt_at, due.id;
END
$$;
