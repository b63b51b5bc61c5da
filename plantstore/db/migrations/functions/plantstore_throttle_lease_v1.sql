-- plantstore_throttle_lease_v1: the trigger on each delivery a create
-- inserts leased to its web process (trigger plantstore_throttle_lease_v1).
-- Frozen once migration 0011 created it: a change is a new version (a new file).
--
-- An unthrottled receiver's delivery is left as it is. For a throttled
-- receiver it takes a token in the create's own statement (no round trip
-- more) through plantstore_throttle_take_v1; if there is none (or another
-- statement holds the bucket: it never waits), it stores the delivery
-- unleased with lease 0, which tells the web process to leave it to the
-- workers (webhooks/engine/throttle.py LEFT_TO_WORKERS).
CREATE FUNCTION plantstore_throttle_lease_v1() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    _taken int;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM subscription
                   WHERE id = NEW.subscription_id AND rate_limit IS NOT NULL) THEN
        RETURN NEW;
    END IF;
    SELECT t.tokens INTO _taken
    FROM plantstore_throttle_take_v1(ARRAY[NEW.subscription_id], ARRAY[1]) t;
    IF _taken IS NULL OR _taken < 1 THEN  -- no token (or the bucket is busy): the workers'
        NEW.locked_until := NULL;
        NEW.lease := 0;
    END IF;
    RETURN NEW;
END
$$
