-- plantstore_throttle_take_for_claim_v1: the tokens for a worker's claim.
-- Frozen once migration 0011 created it: a change is a new version (a new file).
--
-- For every throttled, active receiver with due, unleased deliveries the
-- claim may take (an open breaker's once its probe is due), takes at most
-- what the claim could give it: webhooks/engine/rules.py claim_tokens_wanted (1,
-- its probe, while its breaker is open; else its room, from _ids/_rooms or
-- _default_room, at most _limit), applied here. The tokens are taken by
-- plantstore_throttle_take_v1. Returns (subscription id, tokens taken).
CREATE FUNCTION plantstore_throttle_take_for_claim_v1(
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
    WHERE s.rate_limit IS NOT NULL AND s.is_active
      AND (s.breaker_opened_at IS NULL OR s.breaker_probe_at <= (now() AT TIME ZONE 'UTC'))
      AND EXISTS (SELECT 1 FROM delivery d
                  WHERE d.subscription_id = s.id AND d.status = 'pending'
                    AND d.next_attempt_at <= coalesce(_due_by, (now() AT TIME ZONE 'UTC'))
                    AND (d.locked_until IS NULL
                         OR d.locked_until <= (now() AT TIME ZONE 'UTC')))
)
SELECT t.subscription_id, t.tokens
FROM plantstore_throttle_take_v1((SELECT array_agg(w.id ORDER BY w.id) FROM wanted w),
                                 (SELECT array_agg(w.want ORDER BY w.id) FROM wanted w)) t;
END
$$
