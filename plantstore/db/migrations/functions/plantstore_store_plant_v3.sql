-- plantstore_store_plant_v3: a create's one statement (the delivery store's
-- fast path), returning job rows of the plantstore_job view, so a field
-- senders need is added to that view and nowhere here.
-- Frozen once migration 0014 created it: a change is a new version (a new file).
--
-- Its owner: the user of the token of digest _token_digest when that token
-- is valid now and carries _scope (else SQLSTATE 28000 and nothing is
-- written); with no digest, _owner. Then the plant, and one pending delivery
-- per subscription that hears about it (plantstore_enqueue_new_plant_v1).
-- Its rows: the deliveries' jobs.
CREATE FUNCTION plantstore_store_plant_v3(
    _id bigint, _owner int, _name text, _tag text, _event text, _payload text,
    _traceparent text, _lease_seconds float8, _token_digest text, _scope text)
RETURNS SETOF plantstore_job
LANGUAGE plpgsql AS $$
DECLARE
    _writer int := _owner;
    _deliveries bigint[];
BEGIN
IF _token_digest IS NOT NULL THEN
    SELECT t.user_id INTO _writer FROM token t JOIN "user" u ON u.id = t.user_id
    WHERE t.digest = _token_digest AND t.revoked_at IS NULL
      AND (t.expires_at IS NULL OR t.expires_at > (now() AT TIME ZONE 'UTC'))
      AND _scope = ANY(string_to_array(t.scopes, ' '));
    IF _writer IS NULL THEN
        RAISE EXCEPTION 'the token is not valid for this' USING ERRCODE = '28000';
    END IF;
END IF;
INSERT INTO plant (id, owner_id, name, tag, created_at)
VALUES (_id, _writer, _name, _tag, (now() AT TIME ZONE 'UTC'));
_deliveries := plantstore_enqueue_new_plant_v1(
    _writer, _event, _payload, _traceparent, _lease_seconds);
RETURN QUERY SELECT * FROM plantstore_job j
    WHERE j.delivery_id = ANY(_deliveries) ORDER BY j.subscription_id;
END
$$;
