-- plantstore_store_plant_v2: a create's one statement, as plantstore_store_plant
-- (migration 0009) with its delivery ids as bigint.
-- Frozen once migration 0010 created it: a change is a new version (a new file).
--
-- The plant and one pending delivery per active subscription that hears
-- about it (webhooks/subscriptions/audience.py), leased to the caller unless the
-- receiver's breaker is open. Its owner: the user of the token of digest
-- _token_digest when that token is valid now and carries _scope; with no
-- digest, _owner. Rows: the owner, then each delivery's job (all null when
-- there is none); no row, and nothing written, when the token is not valid.
CREATE FUNCTION plantstore_store_plant_v2(
    _id bigint, _owner int, _name text, _tag text, _event text, _payload text,
    _traceparent text, _lease_seconds float8, _token_digest text, _scope text)
RETURNS TABLE (writer_id int, delivery_id bigint, message_id varchar, payload text,
               attempts int, lease int, traceparent text, subscription_id int, owner_id int,
               url text, bearer_token text, secret varchar, retired_secrets text,
               breaker_open bool)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH writer AS (  -- the plant's owner: the token's user, or the owner given
    SELECT t.user_id AS id FROM token t JOIN "user" u ON u.id = t.user_id
    WHERE t.digest = _token_digest AND t.revoked_at IS NULL
      AND (t.expires_at IS NULL OR t.expires_at > (now() AT TIME ZONE 'UTC'))
      AND _scope = ANY(string_to_array(t.scopes, ' '))
    UNION ALL SELECT _owner WHERE _token_digest IS NULL
), plant AS (
    INSERT INTO plant (id, owner_id, name, tag, created_at)
    SELECT _id, writer.id, _name, _tag, (now() AT TIME ZONE 'UTC') FROM writer
    RETURNING id
), s AS (  -- the active subscriptions that hear about a plant of this owner
    SELECT s.* FROM subscription s LEFT JOIN "user" u ON u.id = s.owner_id
    WHERE s.is_active
      AND (s.owner_id IS NULL OR s.owner_id = (SELECT id FROM writer) OR u.is_admin)
), d AS (  -- leased to this process unless the receiver's breaker is open
    INSERT INTO delivery (subscription_id, message_id, event_type, payload, status,
                          attempts, lease, next_attempt_at, locked_until, created_at,
                          traceparent)
    SELECT s.id, 'msg_' || replace(gen_random_uuid()::text, '-', ''), _event, _payload,
           'pending', 0, 1, (now() AT TIME ZONE 'UTC'),
           CASE WHEN s.breaker_opened_at IS NULL
                THEN (now() AT TIME ZONE 'UTC') + _lease_seconds * interval '1 second' END,
           (now() AT TIME ZONE 'UTC'), _traceparent
    FROM s, plant
    RETURNING *
)
SELECT writer.id, job.* FROM writer LEFT JOIN (
    SELECT d.id::bigint, d.message_id, d.payload, d.attempts, d.lease, d.traceparent,
           s.id, s.owner_id, s.url, s.bearer_token, s.secret, s.retired_secrets,
           s.breaker_opened_at IS NOT NULL
    FROM d JOIN s ON s.id = d.subscription_id)
    AS job (delivery_id, message_id, payload, attempts, lease, traceparent, subscription_id,
            owner_id, url, bearer_token, secret, retired_secrets, breaker_open)
    ON true
ORDER BY job.subscription_id;
END
$$;
