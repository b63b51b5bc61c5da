-- plantstore_store_keyed_plant_v2: plantstore_store_plant_v2 for a request with
-- an Idempotency-Key. Frozen once migration 0010 created it: a change is a
-- new version (a new file).
--
-- The key claimed (its advisory lock, plantstore_idempotency_key_lock of
-- migration 0009, tried and never waited for; the same lock the release
-- before takes), its answer stored, the plant and its deliveries written,
-- all or nothing. Unlike plantstore_store_keyed_plant, no INSERT ... ON
-- CONFLICT: a key's row is taken over by an UPDATE, and a new row is
-- inserted only when none exists, so a replay consumes no id. Each row also
-- says whether the key was claimed (nothing is written otherwise), whether
-- its lock was free, and the key's committed row as found (fingerprint,
-- status, content type, body, expired).
CREATE FUNCTION plantstore_store_keyed_plant_v2(
    _id bigint, _owner int, _name text, _tag text, _event text, _payload text,
    _traceparent text, _lease_seconds float8, _token_digest text, _scope text,
    _key text, _fingerprint text, _status int, _content_type text, _body text,
    _ttl_seconds float8)
RETURNS TABLE (writer_id int, delivery_id bigint, message_id varchar, payload text,
               attempts int, lease int, traceparent text, subscription_id int, owner_id int,
               url text, bearer_token text, secret varchar, retired_secrets text,
               breaker_open bool, key_claimed bool, key_lock_held bool,
               found_fingerprint varchar, found_status int, found_content_type varchar,
               found_body text, found_expired bool)
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
), key_lock AS (  -- the key's advisory lock, tried (never waited for)
    SELECT pg_try_advisory_xact_lock(plantstore_idempotency_key_lock(writer.id, _key))
           AS held
    FROM writer
), found AS (  -- the key's row as this statement sees it
    SELECT k.* FROM idempotency_key k, writer WHERE k.user_id = writer.id AND k.key = _key
), taken_over AS (  -- a row past its time to live, or without an answer
    UPDATE idempotency_key k
    SET fingerprint = _fingerprint, status = _status, content_type = _content_type,
        body = _body, created_at = (now() AT TIME ZONE 'UTC'),
        expires_at = (now() AT TIME ZONE 'UTC') + _ttl_seconds * interval '1 second'
    FROM writer, key_lock
    WHERE key_lock.held AND k.user_id = writer.id AND k.key = _key
      AND (k.expires_at <= (now() AT TIME ZONE 'UTC') OR k.status IS NULL)
    RETURNING k.id
), fresh AS (  -- a new row, only when there is none (an id is taken only then)
    INSERT INTO idempotency_key (user_id, key, fingerprint, status, content_type, body,
                                 created_at, expires_at)
    SELECT writer.id, _key, _fingerprint, _status, _content_type, _body,
           (now() AT TIME ZONE 'UTC'),
           (now() AT TIME ZONE 'UTC') + _ttl_seconds * interval '1 second'
    FROM writer, key_lock WHERE key_lock.held AND NOT EXISTS (SELECT 1 FROM found)
    RETURNING id
), claimed AS (
    SELECT id FROM taken_over UNION ALL SELECT id FROM fresh
), plant AS (
    INSERT INTO plant (id, owner_id, name, tag, created_at)
    SELECT _id, writer.id, _name, _tag, (now() AT TIME ZONE 'UTC') FROM writer, claimed
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
SELECT writer.id, job.*, c.id IS NOT NULL, l.held, k.fingerprint, k.status, k.content_type,
       k.body, k.expires_at <= (now() AT TIME ZONE 'UTC')
FROM writer
JOIN key_lock l ON true
LEFT JOIN claimed c ON true
LEFT JOIN found k ON c.id IS NULL
LEFT JOIN (
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
