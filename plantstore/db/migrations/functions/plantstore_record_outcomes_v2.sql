-- plantstore_record_outcomes_v2: write a batch of outcomes as decided.
-- Frozen once migration 0010 created it: a change is a new version (a new file).
--
-- Each delivery moves to the status given (only under the lease its sender
-- held), each written attempt is logged with its response body excerpt,
-- and each subscription's breaker row takes the move given
-- (webhooks/engine/rules.py BreakerMove: the streak, 'now'/'later'/'clear'/'keep'
-- for its opening and probe times, whether it just succeeded). Nothing is
-- decided here. Returns the ids written, as bigint.
CREATE FUNCTION plantstore_record_outcomes_v2(
    _ids bigint[], _leases int[], _statuses text[], _last_errors text[], _errors text[],
    _response_bodies text[], _retry_in float8[], _started_at timestamp[],
    _status_codes int[], _durations int[],
    _receiver_ids int[], _streaks int[], _opened text[], _probes text[], _succeeded bool[],
    _cooldown float8)
RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH outcome (id, lease, status, last_error, error, response_body, retry_in, started_at,
              status_code, duration_ms) AS (
    SELECT * FROM unnest(_ids, _leases, _statuses, _last_errors, _errors, _response_bodies,
                         _retry_in, _started_at, _status_codes, _durations)
), written AS (
    UPDATE delivery d
    SET status = o.status, attempts = d.attempts + 1, last_error = o.last_error,
        locked_until = NULL,
        next_attempt_at = coalesce((now() AT TIME ZONE 'UTC') + o.retry_in * interval '1 second',
                                   d.next_attempt_at),
        delivered_at = CASE WHEN o.status = 'delivered' THEN (now() AT TIME ZONE 'UTC') END
    FROM outcome o
    WHERE d.id = o.id AND d.lease = o.lease
    RETURNING d.id, d.lease
), logged AS (
    INSERT INTO attempt (delivery_id, started_at, status_code, error, duration_ms,
                         response_body)
    SELECT o.id, o.started_at, o.status_code, o.error, o.duration_ms, o.response_body
    FROM outcome o JOIN written USING (id, lease)
), moved AS (
    UPDATE subscription s
    SET failure_streak = m.streak,
        breaker_opened_at = CASE m.opened WHEN 'now' THEN (now() AT TIME ZONE 'UTC')
                                          WHEN 'clear' THEN NULL
                                          ELSE s.breaker_opened_at END,
        breaker_probe_at = CASE m.probe
            WHEN 'later' THEN (now() AT TIME ZONE 'UTC') + _cooldown * interval '1 second'
            WHEN 'clear' THEN NULL
            ELSE s.breaker_probe_at END,
        last_success_at = CASE WHEN m.succeeded THEN (now() AT TIME ZONE 'UTC')
                               ELSE s.last_success_at END
    FROM unnest(_receiver_ids, _streaks, _opened, _probes, _succeeded)
         AS m (id, streak, opened, probe, succeeded)
    WHERE s.id = m.id
)
SELECT DISTINCT id::bigint FROM written;
END
$$;
