"""The delivery queue's two busiest statements as PL/pgSQL functions
(PostgreSQL only; SQLite has nothing to plan ahead).

A worker claims and writes outcomes hundreds of times a second, and
PostgreSQL planned each of these statements afresh on every call: in a
drain of 5,000 deliveries planning took about two thirds of the database's
time for them (0.74 ms per claim against 0.23 ms running it). A PL/pgSQL
function keeps its statements' plans for the session, on any connection
(through PgBouncer's transaction pooling too, unlike a prepared statement),
so a call costs the running alone. The statements are the ones
``webhooks/queue_sql.py`` ran before; change them with a migration that
replaces the function.

Frozen like 0001: the statements are written out here.
"""
from playhouse.migrate import SqliteMigrator

NOW = "(now() AT TIME ZONE 'UTC')"  # the database's time, naive UTC as stored

CLAIM = f"""
CREATE OR REPLACE FUNCTION plantstore_claim(
    _room_ids int[], _rooms int[], _owner_keys int[], _owner_rooms int[],
    _receiver_room int, _owner_room int, _limit int, _due_by timestamp,
    _cooldown float8, _lease_seconds float8)
RETURNS TABLE (delivery_id int, message_id varchar, payload text, attempts int, lease int,
               traceparent text, subscription_id int, owner_id int, url text,
               bearer_token text, secret varchar, retired_secrets text, breaker_open bool)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH receiver_room (subscription_id, room) AS (
    SELECT * FROM unnest(_room_ids, _rooms)
), owner_room (owner_key, room) AS (
    SELECT * FROM unnest(_owner_keys, _owner_rooms)
), candidate AS (  -- the most overdue few of each subscription, at most its room
    SELECT due.id, s.id AS subscription_id, due.next_attempt_at, due.nth,
           coalesce(s.owner_id, 0) AS owner_key
    FROM subscription s
    CROSS JOIN LATERAL (
        SELECT d.id, d.next_attempt_at,
               row_number() OVER (ORDER BY d.next_attempt_at, d.id) AS nth
        FROM delivery d
        WHERE d.subscription_id = s.id AND d.status = 'pending'
          AND d.next_attempt_at <= coalesce(_due_by, {NOW})
          AND (d.locked_until IS NULL OR d.locked_until <= {NOW})
        ORDER BY d.next_attempt_at, d.id
        LIMIT CASE WHEN s.breaker_opened_at IS NOT NULL THEN 1  -- its probe
                   ELSE coalesce((SELECT room FROM receiver_room r
                                  WHERE r.subscription_id = s.id), _receiver_room) END
    ) due
    WHERE s.is_active
      AND (s.breaker_opened_at IS NULL OR s.breaker_probe_at <= {NOW})
), turn AS (  -- each owner's candidates take turns with the other owners'
    SELECT c.*, row_number() OVER (PARTITION BY c.owner_key
                                   ORDER BY c.nth, c.next_attempt_at, c.id) AS owner_nth
    FROM candidate c
), share AS (  -- how many each subscription gets: the first turns, up to the limit
    SELECT subscription_id, count(*) AS taken FROM (
        SELECT t.subscription_id FROM turn t
        WHERE t.owner_nth <= coalesce((SELECT room FROM owner_room o
                                       WHERE o.owner_key = t.owner_key), _owner_room)
        ORDER BY t.owner_nth, t.next_attempt_at, t.id
        LIMIT _limit) first_turns
    GROUP BY subscription_id
), locked AS (  -- each subscription's share, most overdue first, skipping rows
                -- another claim holds (never waiting for them): the next due
                -- rows take their place
    SELECT mine.id, share.subscription_id FROM share
    CROSS JOIN LATERAL (
        SELECT d.id FROM delivery d
        WHERE d.subscription_id = share.subscription_id AND d.status = 'pending'
          AND d.next_attempt_at <= coalesce(_due_by, {NOW})
          AND (d.locked_until IS NULL OR d.locked_until <= {NOW})
        ORDER BY d.next_attempt_at, d.id
        LIMIT share.taken
        FOR UPDATE SKIP LOCKED
    ) mine
), probe AS (  -- an open breaker's next probe, taken by one claim only
    UPDATE subscription s
    SET breaker_probe_at = {NOW} + _cooldown * interval '1 second'
    WHERE s.id IN (SELECT subscription_id FROM locked)
      AND s.breaker_opened_at IS NOT NULL AND s.breaker_probe_at <= {NOW}
    RETURNING s.id
)
UPDATE delivery d
SET lease = d.lease + 1, locked_until = {NOW} + _lease_seconds * interval '1 second'
FROM subscription s
WHERE d.id = ANY(ARRAY(SELECT id FROM locked))  -- by its key, however many are due
  AND s.id = d.subscription_id
  AND (s.breaker_opened_at IS NULL OR s.id IN (SELECT id FROM probe))
RETURNING d.id, d.message_id, d.payload, d.attempts, d.lease, d.traceparent,
          s.id, s.owner_id, s.url, s.bearer_token, s.secret, s.retired_secrets,
          s.breaker_opened_at IS NOT NULL;
END
$$
"""

RECORD_OUTCOMES = f"""
CREATE OR REPLACE FUNCTION plantstore_record_outcomes(
    _ids int[], _leases int[], _statuses text[], _last_errors text[], _errors text[],
    _retry_in float8[], _started_at timestamp[], _status_codes int[], _durations int[],
    _receiver_ids int[], _closed bool[], _failures int[], _succeeded bool[],
    _threshold int, _cooldown float8)
RETURNS SETOF int
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH outcome (id, lease, status, last_error, error, retry_in, started_at, status_code,
              duration_ms) AS (
    SELECT * FROM unnest(_ids, _leases, _statuses,
                         _last_errors, _errors, _retry_in,
                         _started_at, _status_codes,
                         _durations)
), written AS (  -- only under the lease its sender held
    UPDATE delivery d
    SET status = o.status, attempts = d.attempts + 1, last_error = o.last_error,
        locked_until = NULL,
        next_attempt_at = coalesce({NOW} + o.retry_in * interval '1 second',
                                   d.next_attempt_at),
        delivered_at = CASE WHEN o.status = 'delivered' THEN {NOW} END
    FROM outcome o
    WHERE d.id = o.id AND d.lease = o.lease
    RETURNING d.id
), logged AS (
    INSERT INTO attempt (delivery_id, started_at, status_code, error, duration_ms)
    SELECT o.id, o.started_at, o.status_code, o.error, o.duration_ms
    FROM outcome o JOIN written USING (id)
), receiver (id, closed, failures, succeeded) AS (
    SELECT * FROM unnest(_receiver_ids, _closed,
                         _failures, _succeeded)
), streak AS (
    SELECT r.*, CASE WHEN r.closed THEN r.failures
                     ELSE s.failure_streak + r.failures END AS streak
    FROM receiver r JOIN subscription s USING (id)
), breaker AS (  -- the rules of breaker.py
    UPDATE subscription s
    SET failure_streak = t.streak,
        breaker_opened_at = CASE
            WHEN t.streak >= _threshold AND (t.closed OR s.breaker_opened_at IS NULL)
                THEN {NOW}
            WHEN t.closed THEN NULL
            ELSE s.breaker_opened_at END,
        breaker_probe_at = CASE
            WHEN t.streak >= _threshold
                THEN {NOW} + _cooldown * interval '1 second'
            WHEN t.closed THEN NULL
            ELSE s.breaker_probe_at END,
        last_success_at = CASE WHEN t.succeeded THEN {NOW} ELSE s.last_success_at END
    FROM streak t
    WHERE s.id = t.id AND (t.closed OR t.failures > 0 OR t.succeeded)
)
SELECT id FROM written;
END
$$
"""


def up(migrator, db):
    if not isinstance(migrator, SqliteMigrator):
        db.execute_sql(CLAIM)
        db.execute_sql(RECORD_OUTCOMES)


def down(migrator, db):
    if not isinstance(migrator, SqliteMigrator):
        db.execute_sql("DROP FUNCTION plantstore_record_outcomes")
        db.execute_sql("DROP FUNCTION plantstore_claim")
