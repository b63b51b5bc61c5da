-- plantstore_enqueue_new_plant_v1: enqueueing's one door on PostgreSQL, for
-- the create functions of migration 0014 (in the create's own statement).
-- Frozen once migration 0014 created it: a change is a new version (a new file).
--
-- One pending delivery of _event with _payload per subscription that hears
-- about a new plant of _writer (plantstore_audience_v1), leased for
-- _lease_seconds to the caller unless the receiver's breaker is open. The
-- new deliveries' ids (NULL: none).
CREATE FUNCTION plantstore_enqueue_new_plant_v1(
    _writer int, _event text, _payload text, _traceparent text, _lease_seconds float8)
RETURNS bigint[]
LANGUAGE sql AS $$
WITH d AS (
    INSERT INTO delivery (subscription_id, message_id, event_type, payload, status,
                          attempts, lease, next_attempt_at, locked_until, created_at,
                          traceparent)
    SELECT s.id, 'msg_' || replace(gen_random_uuid()::text, '-', ''), _event, _payload,
           'pending', 0, 1, (now() AT TIME ZONE 'UTC'),
           CASE WHEN s.breaker_opened_at IS NULL
                THEN (now() AT TIME ZONE 'UTC') + _lease_seconds * interval '1 second' END,
           (now() AT TIME ZONE 'UTC'), _traceparent
    FROM plantstore_audience_v1(_writer) s
    RETURNING id
)
SELECT array_agg(id) FROM d
$$;
