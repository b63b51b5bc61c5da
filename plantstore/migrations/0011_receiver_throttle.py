"""A throttle per webhook receiver: a token bucket on its subscription row.

- ``rate_limit``: deliveries per second its receiver may be sent (NULL: no
  limit).
- ``throttle_tokens``: the deliveries it may be sent now, as of
  ``throttle_refilled_at`` (the database's time); NULL: a full bucket.
  ``webhooks/throttle.py`` refills and takes them in one statement.
- PostgreSQL only: that statement and the give-back as PL/pgSQL functions
  (``plantstore_throttle_take_for_claim``, ``plantstore_throttle_take``,
  ``plantstore_throttle_give_back``), so their plans are kept for the
  session: planned afresh, the take before each claim cost milliseconds.
  None waits for a bucket another statement holds (``SKIP LOCKED``): that
  bucket gives no token this time, and no deadlock can form.
- PostgreSQL only: ``plantstore_throttle_lease``, a trigger on each delivery
  a create inserts leased to its web process. For a throttled receiver it
  takes a token in the create's own statement (no round trip more), or, if
  there is none (or another statement holds the bucket: it never waits),
  stores the delivery unleased with ``lease`` 0, which tells the web process
  to leave it to the workers. Unthrottled receivers' deliveries are left as
  they are. (On SQLite the web process takes the token itself.)

Every column may be NULL, so the release before (which neither reads nor
writes them) keeps working on this schema during a rolling upgrade.

Frozen like 0001: the columns and the function are written out here.
"""
from peewee import DateTimeField, FloatField, IntegerField
from playhouse.migrate import SqliteMigrator

TABLE = "subscription"
NOW = "(now() AT TIME ZONE 'UTC')"  # the database's time, naive UTC as stored

LEVEL = f"""least(s.rate_limit::float8,
    coalesce(s.throttle_tokens, s.rate_limit)
    + s.rate_limit * greatest(0, extract(epoch FROM {NOW} - coalesce(s.throttle_refilled_at,
                                                                      {NOW}))))"""
"""A bucket's tokens now: its stored tokens, refilled since, at most full."""

TAKE = f"""
, locked AS (  -- each bucket, locked; one another statement holds is skipped
    SELECT s.id, w.want, {LEVEL} AS level,
           greatest(coalesce(s.throttle_refilled_at, {NOW}), {NOW}) AS refilled
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
SELECT w.id, coalesce(t.n, 0) FROM wanted w LEFT JOIN taken t ON t.id = w.id;"""

TAKE_FOR_CLAIM_FUNCTION = f"""
CREATE OR REPLACE FUNCTION plantstore_throttle_take_for_claim(
    _ids int[], _rooms int[], _default_room int, _limit int, _due_by timestamp)
RETURNS TABLE (subscription_id int, tokens int)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH room (id, room) AS (SELECT * FROM unnest(_ids, _rooms)),
wanted AS (  -- the throttled receivers with due, unleased deliveries the claim may take
    SELECT s.id, CASE WHEN s.breaker_opened_at IS NOT NULL THEN 1
                      ELSE least(coalesce((SELECT r.room FROM room r WHERE r.id = s.id),
                                          _default_room), _limit) END AS want
    FROM subscription s
    WHERE s.rate_limit IS NOT NULL AND s.is_active
      AND (s.breaker_opened_at IS NULL OR s.breaker_probe_at <= {NOW})
      AND EXISTS (SELECT 1 FROM delivery d
                  WHERE d.subscription_id = s.id AND d.status = 'pending'
                    AND d.next_attempt_at <= coalesce(_due_by, {NOW})
                    AND (d.locked_until IS NULL OR d.locked_until <= {NOW}))
){TAKE}
END
$$
"""

TAKE_FUNCTION = f"""
CREATE OR REPLACE FUNCTION plantstore_throttle_take(_ids int[], _wants int[])
RETURNS TABLE (subscription_id int, tokens int)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH wanted AS (
    SELECT w.id, w.want FROM unnest(_ids, _wants) AS w(id, want)
    JOIN subscription s ON s.id = w.id WHERE s.rate_limit IS NOT NULL
){TAKE}
END
$$
"""

GIVE_BACK_FUNCTION = """
CREATE OR REPLACE FUNCTION plantstore_throttle_give_back(_ids int[], _counts int[])
RETURNS void
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
WITH g AS (  -- tokens for a bucket another statement holds are dropped
    SELECT s.id, g.n FROM subscription s
    JOIN unnest(_ids, _counts) AS g(id, n) ON g.id = s.id
    WHERE s.rate_limit IS NOT NULL
    ORDER BY s.id
    FOR UPDATE OF s SKIP LOCKED
)
UPDATE subscription s
SET throttle_tokens = least(s.rate_limit::float8, coalesce(s.throttle_tokens, s.rate_limit)
                                                  + g.n)
FROM g WHERE s.id = g.id;
END
$$
"""

LEASE_FUNCTION = f"""
CREATE OR REPLACE FUNCTION plantstore_throttle_lease() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    _level float8;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM subscription
                   WHERE id = NEW.subscription_id AND rate_limit IS NOT NULL) THEN
        RETURN NEW;
    END IF;
    SELECT least(s.rate_limit::float8, coalesce(s.throttle_tokens, s.rate_limit)
                 + s.rate_limit * greatest(0, extract(epoch FROM
                       {NOW} - coalesce(s.throttle_refilled_at, {NOW})))) INTO _level
    FROM subscription s
    WHERE s.id = NEW.subscription_id AND s.rate_limit IS NOT NULL
    FOR UPDATE SKIP LOCKED;
    IF _level IS NULL OR _level < 1 THEN  -- no token (or the bucket is busy): the workers'
        NEW.locked_until := NULL;
        NEW.lease := 0;
        RETURN NEW;
    END IF;
    UPDATE subscription
    SET throttle_tokens = _level - 1,
        throttle_refilled_at = greatest(coalesce(throttle_refilled_at, {NOW}), {NOW})
    WHERE id = NEW.subscription_id;
    RETURN NEW;
END
$$
"""

LEASE_TRIGGER = """
CREATE TRIGGER plantstore_throttle_lease BEFORE INSERT ON delivery
FOR EACH ROW WHEN (NEW.locked_until IS NOT NULL)
EXECUTE FUNCTION plantstore_throttle_lease()
"""


def up(migrator, db):
    migrator.migrate(
        migrator.add_column(TABLE, "rate_limit", IntegerField(null=True)),
        migrator.add_column(TABLE, "throttle_tokens", FloatField(null=True)),
        migrator.add_column(TABLE, "throttle_refilled_at", DateTimeField(null=True)),
    )
    if not isinstance(migrator, SqliteMigrator):
        for statement in (TAKE_FOR_CLAIM_FUNCTION, TAKE_FUNCTION, GIVE_BACK_FUNCTION,
                          LEASE_FUNCTION, LEASE_TRIGGER):
            db.execute_sql(statement)


def down(migrator, db):
    if not isinstance(migrator, SqliteMigrator):
        db.execute_sql("DROP TRIGGER plantstore_throttle_lease ON delivery")
        for function in ("plantstore_throttle_lease", "plantstore_throttle_give_back",
                         "plantstore_throttle_take", "plantstore_throttle_take_for_claim"):
            db.execute_sql(f"DROP FUNCTION {function}")
    migrator.migrate(*(migrator.drop_column(TABLE, column) for column in
                       ("throttle_refilled_at", "throttle_tokens", "rate_limit")))
