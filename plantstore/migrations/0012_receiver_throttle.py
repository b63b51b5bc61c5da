"""A throttle per webhook receiver: a token bucket on its subscription row.

- ``rate_limit``: deliveries per second its receiver may be sent (NULL: no
  limit).
- ``throttle_tokens``: the deliveries it may be sent now, as of
  ``throttle_refilled_at`` (the database's time); NULL: a full bucket.
  ``webhooks/throttle.py`` refills and takes them in one statement.
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
        db.execute_sql(LEASE_FUNCTION)
        db.execute_sql(LEASE_TRIGGER)


def down(migrator, db):
    if not isinstance(migrator, SqliteMigrator):
        db.execute_sql("DROP TRIGGER plantstore_throttle_lease ON delivery")
        db.execute_sql("DROP FUNCTION plantstore_throttle_lease")
    migrator.migrate(*(migrator.drop_column(TABLE, column) for column in
                       ("throttle_refilled_at", "throttle_tokens", "rate_limit")))
