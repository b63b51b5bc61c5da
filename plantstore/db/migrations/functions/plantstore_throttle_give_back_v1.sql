-- plantstore_throttle_give_back_v1: tokens taken but not spent, back into
-- their buckets.
-- Frozen once migration 0011 created it: a change is a new version (a new file).
--
-- _ids/_counts: how many tokens each subscription gives back. The bucket's
-- cap is webhooks/engine/rules.py's (tokens_given_back): what it held (NULL: full)
-- plus the count, at most rate_limit. Tokens for a bucket another statement
-- holds are dropped (SKIP LOCKED: that only ever sends less).
CREATE FUNCTION plantstore_throttle_give_back_v1(_ids int[], _counts int[])
RETURNS void
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
WITH g AS (  -- tokens for a bucket another statement holds are dropped
    SELECT s.id, g.n FROM subscription s
    JOIN unnest(_ids, _counts) AS g(id, n) ON g.id = s.id
    WHERE s.rate_limit IS NOT NULL
    ORDER BY s.id
    FOR UPDATE OF s SKIP LOCKED
)
UPDATE subscription s
SET throttle_tokens = least(s.rate_limit::float8, coalesce(s.throttle_tokens, s.rate_limit)
                                                  + g.n)
FROM g WHERE s.id = g.id;
END
$$
