"""The delivery store's contract (``webhooks/engine/store``): every operation, run
against the store of the test's backend. The suite runs once on SQLite and
once on PostgreSQL (``PLANTSTORE_TEST_DATABASE_URL``), so both stores pass
the same tests, as River's drivers pass ``riverdrivertest``."""
import datetime

import pytest

from plantstore.db import clock
from plantstore.db.models import Attempt, Delivery, Subscription, User
from plantstore.webhooks.config import settings_of
from plantstore.webhooks.engine import rules, store
from plantstore.webhooks.engine.job import JOB_COLUMNS
from plantstore.webhooks.engine.store import OutcomeRow
from plantstore.webhooks.engine.throttle import LEFT_TO_WORKERS
from plugins.webhooks import store_plants, subscribe


@pytest.fixture
def backend(app):
    return store.current()


@pytest.fixture
def two_receivers(app, runner, alice):
    """Two operator subscriptions; alice's three plants, each with two deliveries, due."""
    first, _ = subscribe(runner, "http://127.0.0.1:9/a")
    second, _ = subscribe(runner, "http://127.0.0.1:9/b")
    store_plants(app, [1, 2, 3], give_back=True)
    return first, second


def outcome(delivery_id, lease, status="delivered", error=None, retry_in=None, body="ok"):
    return OutcomeRow(delivery_id=delivery_id, lease=lease, status=status,
                      last_error=error, error=error, response_body=body, retry_in=retry_in,
                      started_at=clock.local_now(), status_code=200 if error is None else 500,
                      duration_ms=3)


def lease_all(backend, settings, shares):
    with backend.claim_transaction():
        return backend.lease(shares, set(), None, settings)


def test_due_candidates_are_most_overdue_first_at_most_most_per_subscription(
        backend, two_receivers):
    first, second = two_receivers
    candidates = backend.due_candidates(2, None)
    subscriptions = [c["subscription_id"] for c in candidates]
    # plant 1's two deliveries (due at once), then plant 2's; plant 3's wait
    assert sorted(subscriptions[:2]) == sorted(subscriptions[2:]) == [first, second]
    assert {c["owner_key"] for c in candidates} == {0}
    assert not any(c["breaker_open"] for c in candidates)


def test_lease_takes_each_share_with_every_job_column(app, backend, two_receivers):
    first, second = two_receivers
    rows = lease_all(backend, settings_of(app), {first: 2, second: 1})
    assert [row["subscription_id"] for row in rows].count(first) == 2
    assert [row["subscription_id"] for row in rows].count(second) == 1
    assert all(set(JOB_COLUMNS) <= set(row) for row in rows)
    assert all(row["lease"] == 2 and row["url"].startswith("http://") for row in rows)
    assert {row["event_type"] for row in rows} == {"plant.created"}  # migration 0015
    # leased: no longer due, and another lease takes the next ones
    assert len(backend.due_candidates(5, None)) == 3
    assert backend.jobs_of([row["delivery_id"] for row in rows]) == sorted(
        rows, key=lambda row: row["delivery_id"])


def test_lease_takes_an_open_breakers_delivery_only_with_its_probe(app, backend, two_receivers):
    first, _ = two_receivers
    Subscription.update(breaker_opened_at=clock.before(60), breaker_probe_at=clock.before(1)) \
        .where(Subscription.id == first).execute()
    settings = settings_of(app)
    with backend.claim_transaction():
        assert len(backend.lease({first: 1}, {first}, None, settings)) == 1
    with backend.claim_transaction():  # the next probe is a cooldown away
        assert backend.lease({first: 1}, {first}, None, settings) == []


def test_insert_and_take_for_resend(app, backend, two_receivers):
    first, _ = two_receivers
    delivery_id = backend.insert_delivery(first, "plant.test", "{}", 30)
    assert not backend.take_for_resend(delivery_id, 30)  # leased by its insert
    Delivery.update(locked_until=None, status="failed", attempts=3) \
        .where(Delivery.id == delivery_id).execute()
    assert backend.take_for_resend(delivery_id, 30)
    delivery = Delivery.get_by_id(delivery_id)
    assert (delivery.status, delivery.attempts, delivery.lease) == ("pending", 0, 2)


def test_write_outcomes_under_their_lease_with_the_breakers_moves(app, backend, two_receivers):
    first, second = two_receivers
    settings = settings_of(app)
    done, retried = sorted(lease_all(backend, settings, {first: 2}),
                           key=lambda row: row["delivery_id"])
    moves = {first: rules.BreakerMove(4, rules.NOW, rules.LATER, False),
             second: rules.BreakerMove(0, rules.CLEAR, rules.CLEAR, True)}
    written = backend.write_outcomes(
        [outcome(done["delivery_id"], done["lease"]),
         outcome(retried["delivery_id"], retried["lease"], "pending", "HTTP 500", 60, "x"),
         outcome(retried["delivery_id"], retried["lease"] - 1)],  # a lease lost: nothing
        moves, settings)
    assert written == {done["delivery_id"], retried["delivery_id"]}
    assert Delivery.get_by_id(done["delivery_id"]).status == "delivered"
    again = Delivery.get_by_id(retried["delivery_id"])
    assert (again.status, again.attempts, again.last_error) == ("pending", 1, "HTTP 500")
    assert sorted(a.response_body for a in Attempt.select()) == ["ok", "x"]
    opened, closed = Subscription.get_by_id(first), Subscription.get_by_id(second)
    assert opened.failure_streak == 4 and opened.breaker_opened_at is not None
    assert opened.breaker_probe_at is not None and opened.last_success_at is None
    assert closed.breaker_opened_at is None and closed.last_success_at is not None
    assert backend.breaker_states({first, second}) == {
        first: rules.BreakerState(4, True), second: rules.BreakerState(0, False)}


def test_give_back_clears_only_the_leases_still_held(app, backend, two_receivers):
    first, _ = two_receivers
    [row] = lease_all(backend, settings_of(app), {first: 1})
    backend.give_back([(row["delivery_id"], row["lease"] - 1)])
    assert Delivery.get_by_id(row["delivery_id"]).locked_until is not None
    backend.give_back([(row["delivery_id"], row["lease"])])
    assert Delivery.get_by_id(row["delivery_id"]).locked_until is None
    assert backend.still_there([row["delivery_id"], 10**12]) == {row["delivery_id"]}


def test_stopping_fails_the_waiting_deliveries_under_a_new_lease(app, backend, two_receivers):
    first, second = two_receivers
    before = {d.id: d.lease for d in Delivery.select().where(Delivery.subscription == first)}
    assert backend.stop_subscription(first, "gone")
    stopped = Subscription.get_by_id(first)
    assert not stopped.is_active and stopped.disabled_reason == "gone"
    for delivery in Delivery.select().where(Delivery.subscription == first):
        assert delivery.status == "failed" and delivery.lease == before[delivery.id] + 1
        assert delivery.last_error == "subscription disabled: gone"
    # failing for too long: only past the cutoff
    assert not backend.stop_subscription(second, "failing", failing_cutoff_seconds=3600)
    Subscription.update(created_at=clock.before(7200)).where(Subscription.id == second).execute()
    assert backend.stop_subscription(second, "failing", failing_cutoff_seconds=3600)


def test_enable_and_recover_under_a_new_lease(app, backend, two_receivers):
    first, _ = two_receivers
    backend.stop_subscription(first, "gone")
    before = {d.id: d.lease for d in Delivery.select().where(Delivery.subscription == first)}
    backend.enable(first)
    assert Subscription.get_by_id(first).is_active
    assert backend.recover(first, datetime.datetime(2000, 1, 1)) == 3
    for delivery in Delivery.select().where(Delivery.subscription == first):
        assert delivery.status == "pending" and delivery.lease == before[delivery.id] + 1


def test_purge_deletes_finished_deliveries_with_their_attempts(app, backend, two_receivers):
    first, _ = two_receivers
    settings = settings_of(app)
    rows = lease_all(backend, settings, {first: 3})
    backend.write_outcomes([outcome(r["delivery_id"], r["lease"]) for r in rows], {}, settings)
    assert backend.purge_batch(1, 10) == 0  # too young
    Delivery.update(created_at=clock.before(3 * 86400)).execute()
    assert backend.purge_batch(1, 2) == 2
    assert backend.purge_batch(1, 10) == 1
    assert Attempt.select().count() == 0 and Delivery.select().count() == 3


def test_a_users_plant_is_heard_by_operators_and_its_owner_only(app, runner, alice, bob):
    for name in ("alice", "bob"):
        Subscription.create(owner=User.get(User.name == name), secret="whsec_x",
                            url=f"https://example.com/{name}")
    subscribe(runner, "http://127.0.0.1:9/operator")
    jobs = store_plants(app, [1], owner="alice", give_back=True)
    assert sorted(job.url for job in jobs) == ["http://127.0.0.1:9/operator",
                                               "https://example.com/alice"]
    assert all(job.lease == 1 and job.attempts == 0 for job in jobs)


# --- the throttle ---------------------------------------------------------------

def throttle(subscription_id, rate_limit, tokens):
    """Give a subscription a bucket holding ``tokens`` that refills only in an
    hour, so what a take gets does not depend on how long the test takes."""
    Subscription.update(rate_limit=rate_limit, throttle_tokens=tokens,
                        throttle_refilled_at=clock.after(3600)) \
        .where(Subscription.id == subscription_id).execute()


def test_throttle_take_and_give_back_keep_the_bucket_within_its_limit(backend, two_receivers):
    first, second = two_receivers
    throttle(first, 5, 3)
    assert backend.throttle_take({first: 100, second: 100}) == {first: 3}  # second: no limit
    assert backend.throttle_take({first: 1}) == {first: 0}
    backend.throttle_give_back({first: 2})
    assert backend.throttle_take({first: 1}) == {first: 1}
    backend.throttle_give_back({first: 100, second: 100})  # at most a full bucket
    assert Subscription.get_by_id(first).throttle_tokens == 5
    assert Subscription.get_by_id(second).throttle_tokens is None
    assert backend.throttle_take({second: 1}) == {}


def test_a_full_bucket_refills_no_further_than_its_limit(backend, two_receivers):
    first, _ = two_receivers
    Subscription.update(rate_limit=4, throttle_tokens=1,
                        throttle_refilled_at=clock.before(3600)) \
        .where(Subscription.id == first).execute()
    assert backend.throttle_take({first: 100}) == {first: 4}


def test_throttle_take_for_claim_takes_what_the_claim_could_give(app, backend, two_receivers):
    first, second = two_receivers
    throttle(first, 10, 10)
    throttle(second, 10, 10)
    # first: its room (2) from the default; second: its own room (5) cut to the limit (4)
    assert backend.throttle_take_for_claim({second: 5}, 2, 4, None) == {first: 2, second: 4}
    # an open breaker's probe wants one token, only once the probe is due
    Subscription.update(breaker_opened_at=clock.before(60), breaker_probe_at=clock.after(60)) \
        .where(Subscription.id == first).execute()
    assert backend.throttle_take_for_claim({}, 2, 4, None) == {second: 2}
    Subscription.update(breaker_probe_at=clock.before(1)).where(Subscription.id == first).execute()
    assert backend.throttle_take_for_claim({}, 2, 4, None) == {first: 1, second: 2}
    # a receiver with no due, unleased delivery takes nothing
    lease_all(backend, settings_of(app), {second: 3})
    assert backend.throttle_take_for_claim({}, 2, 4, None) == {first: 1}


def test_an_insert_leased_to_a_web_process_takes_its_token_where_the_store_says_so(
        backend, two_receivers):
    first, second = two_receivers
    throttle(first, 5, 1)
    with_token = backend.insert_delivery(first, "plant.test", "{}", 30)
    without = backend.insert_delivery(first, "plant.test", "{}", 30)
    free = backend.insert_delivery(second, "plant.test", "{}", 30)
    leases = {row["delivery_id"]: row["lease"]
              for row in backend.jobs_of([with_token, without, free])}
    if backend.TAKES_TOKEN_AT_INSERT:
        assert leases == {with_token: 1, without: LEFT_TO_WORKERS, free: 1}
        assert Delivery.get_by_id(without).locked_until is None
        assert Subscription.get_by_id(first).throttle_tokens == 0
    else:  # the web process takes it (throttle.admits): the insert leaves the bucket
        assert leases == {with_token: 1, without: 1, free: 1}
        assert Subscription.get_by_id(first).throttle_tokens == 1
