-- plantstore_store_keyed_plant_v3: plantstore_store_plant_v3 for a request
-- with an Idempotency-Key, returning job rows of the plantstore_job view.
-- Frozen once migration 0014 created it: a change is a new version (a new file).
--
-- The key claimed as plantstore_store_keyed_plant_v2 claims it (its advisory
-- lock tried, never waited for; a key's row taken over by an UPDATE, a new
-- row inserted only when none exists), its answer stored, the plant and its
-- deliveries written, all or nothing. A token not valid: SQLSTATE 28000. A
-- key not claimed: SQLSTATE PSKEY and nothing written, the detail a JSON
-- object saying whether its lock was free and the key's committed row as
-- found (fingerprint, status, content_type, body, expired).
CREATE FUNCTION plantstore_store_keyed_plant_v3(
    _id bigint, _owner int, _name text, _tag text, _event text, _payload text,
    _traceparent text, _lease_seconds float8, _token_digest text, _scope text,
    _key text, _fingerprint text, _status int, _content_type text, _body text,
    _ttl_seconds float8)
RETURNS SETOF plantstore_job
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    _writer int;
    _claimed bigint;
    _held bool;
    _found json;
    _deliveries bigint[];
BEGIN
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
)
SELECT writer.id, c.id, l.held,
       CASE WHEN c.id IS NULL THEN json_build_object(
           'fingerprint', k.fingerprint, 'status', k.status, 'content_type', k.content_type,
           'body', k.body, 'expired', k.expires_at <= (now() AT TIME ZONE 'UTC')) END
INTO _writer, _claimed, _held, _found
FROM writer
JOIN key_lock l ON true
LEFT JOIN claimed c ON true
LEFT JOIN found k ON c.id IS NULL
LEFT JOIN plant p ON true;
IF _writer IS NULL THEN
    RAISE EXCEPTION 'the token is not valid for this' USING ERRCODE = '28000';
END IF;
IF _claimed IS NULL THEN
    RAISE EXCEPTION 'the key is taken' USING ERRCODE = 'PSKEY',
        DETAIL = json_build_object('lock_held', _held, 'found', _found)::text;
END IF;
_deliveries := plantstore_enqueue_new_plant_v1(
    _writer, _event, _payload, _traceparent, _lease_seconds);
RETURN QUERY SELECT * FROM plantstore_job j
    WHERE j.delivery_id = ANY(_deliveries) ORDER BY j.subscription_id;
END
$$;
