-- plantstore_delivery_due_v1: the due rule of one delivery, written once.
-- Frozen once migration 0018 created it: a change is a new version (a new file).
--
-- A delivery is due, and a claim may take it, when it is pending, its next
-- attempt's time has come by _due_by (the database's clock when null), and
-- no sender holds it (its lease unset or run out by the database's clock).
-- Whether its subscription may be sent to is plantstore_subscription_due_v1's.
--
-- One SQL expression over scalar arguments, STABLE, neither STRICT nor
-- SECURITY DEFINER: the planner inlines it into the statement that calls
-- it with a delivery's columns, so the statement still reads through the
-- partial index delivery_due_per_subscription (status = 'pending') as if
-- the rule were written there (checked by
-- tests/webhooks/engine/store/test_due_rule.py).
CREATE FUNCTION plantstore_delivery_due_v1(
    _status text, _next_attempt_at timestamp, _locked_until timestamp, _due_by timestamp)
RETURNS bool
LANGUAGE sql STABLE AS $$
SELECT _status = 'pending'
   AND _next_attempt_at <= coalesce(_due_by, (now() AT TIME ZONE 'UTC'))
   AND (_locked_until IS NULL OR _locked_until <= (now() AT TIME ZONE 'UTC'))
$$;
