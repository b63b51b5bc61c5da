"""A create's one statement as PL/pgSQL functions (PostgreSQL only; SQLite
has nothing to plan ahead), as 0008 did for the claim and the outcome batch.

A create is one statement: its token checked, the plant, its deliveries
and, with an ``Idempotency-Key``, the key's row written together. Planning
that statement took longer than running it (about 0.3 ms against 0.2 ms);
a function keeps its plan for the session, through PgBouncer's transaction
pooling too, so a call costs the running alone. ``webhooks/queue_sql.py``
calls them; change them with a migration that replaces the function.

- ``plantstore_idempotency_key_lock(user, key)``: the advisory lock (a
  signed 64-bit number) of a user's key. Two keys whose numbers collide
  (a chance in 2**64) only cost each other a 409 while both are in progress.
- ``plantstore_store_plant``: the plant and one pending delivery per active
  subscription that hears about it. Its owner is the user of the token of
  digest ``_token_digest`` when that token is valid now and carries
  ``_scope``; with no digest, ``_owner``. Rows: the owner, then each
  delivery's job (all null when there is none); no row, and nothing
  written, when the token is not valid.
- ``plantstore_store_keyed_plant``: the same with the key claimed and its
  answer stored, all or nothing; each row also says whether the key was
  claimed (nothing is written otherwise), whether its lock was free, and
  the key's committed row as found (fingerprint, status, content type,
  body, expired).

Frozen like 0001: the statements are written out here.
"""
from playhouse.migrate import SqliteMigrator

NOW = "(now() AT TIME ZONE 'UTC')"  # the database's time, naive UTC as stored

KEY_LOCK = """
CREATE OR REPLACE FUNCTION plantstore_idempotency_key_lock(_user_id int, _key text)
RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
SELECT ('x' || left(encode(sha256(convert_to(
    'idempotency-key ' || _user_id || ' ' || _key, 'UTF8')), 'hex'), 16))::bit(64)::bigint
$$
"""

STORE_ARGUMENTS = """_id bigint, _owner int, _name text, _tag text, _event text, _payload text,
    _traceparent text, _lease_seconds float8, _token_digest text, _scope text"""

JOB_RESULT = """writer_id int, delivery_id int, message_id varchar, payload text, attempts int,
    lease int, traceparent text, subscription_id int, owner_id int, url text,
    bearer_token text, secret varchar, retired_secrets text, breaker_open bool"""

WRITER = f"""writer AS (  -- the plant's owner: the token's user, or the owner given
    SELECT t.user_id AS id FROM token t JOIN "user" u ON u.id = t.user_id
    WHERE t.digest = _token_digest AND t.revoked_at IS NULL
      AND (t.expires_at IS NULL OR t.expires_at > {NOW})
      AND _scope = ANY(string_to_array(t.scopes, ' '))
    UNION ALL SELECT _owner WHERE _token_digest IS NULL
)"""


def plant_with_deliveries(claimed=""):
    """CTEs: the plant (for the writer, and only if ``claimed`` has a row
    when given), the subscriptions that hear about it, its deliveries."""
    return f"""plant AS (
    INSERT INTO plant (id, owner_id, name, tag, created_at)
    SELECT _id, writer.id, _name, _tag, {NOW} FROM writer{claimed}
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
           'pending', 0, 1, {NOW},
           CASE WHEN s.breaker_opened_at IS NULL
                THEN {NOW} + _lease_seconds * interval '1 second' END,
           {NOW}, _traceparent
    FROM s, plant
    RETURNING *
)"""


JOBS = """(SELECT d.id, d.message_id, d.payload, d.attempts, d.lease, d.traceparent,
           s.id, s.owner_id, s.url, s.bearer_token, s.secret, s.retired_secrets,
           s.breaker_opened_at IS NOT NULL
    FROM d JOIN s ON s.id = d.subscription_id)
    AS job (delivery_id, message_id, payload, attempts, lease, traceparent, subscription_id,
            owner_id, url, bearer_token, secret, retired_secrets, breaker_open)"""

STORE_PLANT = f"""
CREATE OR REPLACE FUNCTION plantstore_store_plant({STORE_ARGUMENTS})
RETURNS TABLE ({JOB_RESULT})
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH {WRITER}, {plant_with_deliveries()}
SELECT writer.id, job.* FROM writer LEFT JOIN {JOBS} ON true ORDER BY job.subscription_id;
END
$$
"""

STORE_KEYED_PLANT = f"""
CREATE OR REPLACE FUNCTION plantstore_store_keyed_plant({STORE_ARGUMENTS},
    _key text, _fingerprint text, _status int, _content_type text, _body text,
    _ttl_seconds float8)
RETURNS TABLE ({JOB_RESULT}, key_claimed bool, key_lock_held bool,
               found_fingerprint varchar, found_status int, found_content_type varchar,
               found_body text, found_expired bool)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH {WRITER}, key_lock AS (  -- the key's advisory lock, tried (never waited for)
    SELECT pg_try_advisory_xact_lock(plantstore_idempotency_key_lock(writer.id, _key))
           AS held
    FROM writer
), claimed AS (  -- the key's row with its answer: new, or over one expired or unanswered
    INSERT INTO idempotency_key (user_id, key, fingerprint, status, content_type, body,
                                 created_at, expires_at)
    SELECT writer.id, _key, _fingerprint, _status, _content_type, _body,
           {NOW}, {NOW} + _ttl_seconds * interval '1 second'
    FROM writer, key_lock WHERE held
    ON CONFLICT (user_id, key) DO UPDATE
    SET fingerprint = EXCLUDED.fingerprint, status = EXCLUDED.status,
        content_type = EXCLUDED.content_type, body = EXCLUDED.body,
        created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
    WHERE idempotency_key.expires_at <= {NOW} OR idempotency_key.status IS NULL
    RETURNING id
), {plant_with_deliveries(", claimed")}
SELECT writer.id, job.*, c.id IS NOT NULL, l.held, k.fingerprint, k.status, k.content_type,
       k.body, k.expires_at <= {NOW}
FROM writer
JOIN key_lock l ON true
LEFT JOIN claimed c ON true
LEFT JOIN idempotency_key k ON c.id IS NULL AND k.user_id = writer.id AND k.key = _key
LEFT JOIN {JOBS} ON true
ORDER BY job.subscription_id;
END
$$
"""


def up(migrator, db):
    if not isinstance(migrator, SqliteMigrator):
        db.execute_sql(KEY_LOCK)
        db.execute_sql(STORE_PLANT)
        db.execute_sql(STORE_KEYED_PLANT)


def down(migrator, db):
    if not isinstance(migrator, SqliteMigrator):
        db.execute_sql("DROP FUNCTION plantstore_store_keyed_plant")
        db.execute_sql("DROP FUNCTION plantstore_store_plant")
        db.execute_sql("DROP FUNCTION plantstore_idempotency_key_lock")
