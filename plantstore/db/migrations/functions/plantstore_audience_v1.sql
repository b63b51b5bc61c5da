-- plantstore_audience_v1: who hears about a new plant of _owner, the rule
-- written once on PostgreSQL (webhooks/subscriptions/audience.py; SQLite's
-- is the store's `audience` query). Frozen once migration 0014 created it.
--
-- The active subscriptions of operators (no owner), of _owner, and of admins.
CREATE FUNCTION plantstore_audience_v1(_owner int)
RETURNS SETOF subscription
LANGUAGE sql STABLE AS $$
SELECT s.* FROM subscription s LEFT JOIN "user" u ON u.id = s.owner_id
WHERE s.is_active AND (s.owner_id IS NULL OR s.owner_id = _owner OR u.is_admin)
$$;
