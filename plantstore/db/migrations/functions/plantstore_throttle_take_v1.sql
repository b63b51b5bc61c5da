-- plantstore_throttle_take_v1: take tokens from throttled receivers' buckets.
-- Frozen once migration 0011 created it: a change is a new version (a new file).
--
-- _ids/_wants: how many tokens each subscription wants. For each of them
-- that is throttled (rate_limit set), returns (subscription id, tokens
-- taken). The bucket's rule is webhooks/engine/rules.py's (bucket_level,
-- tokens_taken), applied here in one statement on the database's clock:
-- the stored tokens (NULL: a full bucket), refilled at rate_limit a second
-- since throttle_refilled_at, at most rate_limit; the whole tokens of that,
-- at most the want, are taken. A bucket another statement holds is skipped
-- (SKIP LOCKED: it gives no token this time, and no deadlock can form).
-- A function, so its plan is kept for the session. The one place the
-- bucket is refilled and taken: plantstore_throttle_take_for_claim_v1 and
-- plantstore_throttle_lease_v1 call it.
CREATE FUNCTION plantstore_throttle_take_v1(_ids int[], _wants int[])
RETURNS TABLE (subscription_id int, tokens int)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH wanted AS (
    SELECT w.id, w.want FROM unnest(_ids, _wants) AS w(id, want)
    JOIN subscription s ON s.id = w.id WHERE s.rate_limit IS NOT NULL
), locked AS (  -- each bucket, locked; one another statement holds is skipped
    SELECT s.id, w.want,
           least(s.rate_limit::float8,
                 coalesce(s.throttle_tokens, s.rate_limit)
                 + s.rate_limit * greatest(0, extract(epoch FROM
                       (now() AT TIME ZONE 'UTC')
                       - coalesce(s.throttle_refilled_at, (now() AT TIME ZONE 'UTC')))))
               AS level,
           greatest(coalesce(s.throttle_refilled_at, (now() AT TIME ZONE 'UTC')),
                    (now() AT TIME ZONE 'UTC')) AS refilled
    FROM subscription s JOIN wanted w ON w.id = s.id
    WHERE s.rate_limit IS NOT NULL
    ORDER BY s.id
    FOR UPDATE OF s SKIP LOCKED
), taken AS (
    SELECT l.id, l.level, l.refilled, least(floor(l.level)::int, l.want) AS n FROM locked l
), spent AS (
    UPDATE subscription s SET throttle_tokens = t.level - t.n, throttle_refilled_at = t.refilled
    FROM taken t WHERE s.id = t.id AND t.n > 0
)
SELECT w.id, coalesce(t.n, 0) FROM wanted w LEFT JOIN taken t ON t.id = w.id;
END
$$
