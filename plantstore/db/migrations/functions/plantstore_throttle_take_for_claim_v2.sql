-- plantstore_throttle_take_for_claim_v2: plantstore_throttle_take_for_claim_v1
-- with the due rule called (plantstore_subscription_due_v1,
-- plantstore_delivery_due_v1, inlined by the planner), not written out.
-- Frozen once migration 0018 created it: a change is a new version (a new file).
--
-- For every throttled receiver with deliveries a claim may take now, takes
-- at most what the claim could give it: webhooks/engine/rules.py
-- claim_tokens_wanted (1, its probe, while its breaker is open; else its
-- room, from _ids/_rooms or _default_room, at most _limit), applied here.
-- The tokens are taken by plantstore_throttle_take_v1. Returns
-- (subscription id, tokens taken).
CREATE FUNCTION plantstore_throttle_take_for_claim_v2(
    _ids int[], _rooms int[], _default_room int, _limit int, _due_by timestamp)
RETURNS TABLE (subscription_id int, tokens int)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH room (id, room) AS (SELECT * FROM unnest(_ids, _rooms)),
wanted AS (  -- the throttled receivers with due, unleased deliveries the claim may take
    SELECT s.id, CASE WHEN s.breaker_opened_at IS NOT NULL THEN 1
                      ELSE least(coalesce((SELECT r.room FROM room r WHERE r.id = s.id),
                                          _default_room), _limit) END AS want
    FROM subscription s
    WHERE s.rate_limit IS NOT NULL
      AND plantstore_subscription_due_v1(s.is_active, s.breaker_opened_at, s.breaker_probe_at)
      AND EXISTS (SELECT 1 FROM delivery d
                  WHERE d.subscription_id = s.id
                    AND plantstore_delivery_due_v1(d.status, d.next_attempt_at,
                                                   d.locked_until, _due_by))
)
SELECT t.subscription_id, t.tokens
FROM plantstore_throttle_take_v1((SELECT array_agg(w.id ORDER BY w.id) FROM wanted w),
                                 (SELECT array_agg(w.want ORDER BY w.id) FROM wanted w)) t;
END
$$;
