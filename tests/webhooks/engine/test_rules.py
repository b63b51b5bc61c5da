"""The delivery rules on their own (``webhooks/engine/rules.py``): no database."""
import datetime
import types

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plantstore.webhooks.engine import rules
from plantstore.webhooks.engine.rules import CLEAR, KEEP, LATER, NOW, BreakerMove, BreakerState
from plantstore.webhooks.sending.http_post import SendResult

SETTINGS = types.SimpleNamespace(retry_schedule=(10.0, 60.0, 300.0), longest_delay=300.0,
                                 disable_after_hours=2.0)
AT = datetime.datetime(2026, 1, 1)


def answered(status, retry_after=None):
    return SendResult(AT, 5, status_code=status, retry_after=retry_after)


def unanswered():
    return SendResult(AT, 5, error="connection failed: refused")


def test_a_2xx_is_delivered_and_a_410_is_gone_whatever_the_attempt():
    assert rules.decide(99, answered(204), SETTINGS) == rules.Outcome(rules.DELIVERED)
    assert rules.decide(1, answered(410), SETTINGS) == rules.Outcome(rules.GONE)
    assert rules.Outcome(rules.GONE).status == "failed"
    assert rules.Outcome(rules.DELIVERED).status == "delivered"


def test_failures_follow_the_schedule_then_fail():
    for attempts_made, step in enumerate(SETTINGS.retry_schedule, start=1):
        outcome = rules.decide(attempts_made, answered(500), SETTINGS)
        assert outcome.kind == rules.RETRY and outcome.status == "pending"
        assert step * 0.9 <= outcome.retry_in <= step * 1.1
    assert rules.decide(4, unanswered(), SETTINGS) == rules.Outcome(rules.FAILED)


def test_jitter_spreads_a_step_by_a_tenth_either_way():
    assert rules.retry_delay(1, None, SETTINGS, uniform=lambda low, high: low) == 9.0
    assert rules.retry_delay(1, None, SETTINGS, uniform=lambda low, high: high) == 11.0


def test_retry_after_lengthens_a_delay_up_to_the_largest_step_only():
    fixed = {"uniform": lambda low, high: 1.0}
    assert rules.retry_delay(1, 120.0, SETTINGS, **fixed) == 120.0
    assert rules.retry_delay(1, 5.0, SETTINGS, **fixed) == 10.0
    assert rules.retry_delay(1, 10_000.0, SETTINGS, **fixed) == 300.0
    assert rules.retry_delay(4, 120.0, SETTINGS, **fixed) is None


def test_failures_are_no_answer_or_a_5xx():
    assert [rules.is_failure(r) for r in (unanswered(), answered(503), answered(302),
                                          answered(404), answered(200))] == [
        True, True, False, False, False]


def test_a_breaker_opens_when_the_streak_reaches_the_threshold():
    move = rules.breaker_move(False, 2, False, 3, BreakerState(streak=1, is_open=False))
    assert move == BreakerMove(streak=3, opened=NOW, probe=LATER, succeeded=False)


def test_an_open_breaker_keeps_its_opening_time_and_pushes_its_probe():
    move = rules.breaker_move(False, 1, False, 3, BreakerState(streak=5, is_open=True))
    assert move == BreakerMove(streak=6, opened=KEEP, probe=LATER, succeeded=False)


def test_failures_below_the_threshold_change_only_the_streak():
    move = rules.breaker_move(False, 1, False, 3, BreakerState(streak=0, is_open=False))
    assert move == BreakerMove(streak=1, opened=KEEP, probe=KEEP, succeeded=False)


def test_a_success_closes_the_breaker_without_reading_its_state():
    assert not rules.needs_state(True, 0)
    assert rules.breaker_move(True, 0, True, 3) == BreakerMove(0, CLEAR, CLEAR, True)
    # failures after the success of the same batch count from zero
    assert rules.breaker_move(True, 3, True, 3) == BreakerMove(3, NOW, LATER, True)


def test_a_move_that_depends_on_the_state_refuses_to_guess_it():
    assert rules.needs_state(False, 1)
    with pytest.raises(ValueError):
        rules.breaker_move(False, 1, False, 3)


def test_nothing_moves_without_a_failure_or_a_success():
    assert rules.breaker_move(False, 0, False, 3) is None
    changes = rules.batch_changes([(7, answered(404)), (8, answered(500))])
    moves = rules.breaker_moves(changes, {}, 3)
    assert moves == {}  # 8 needs its state and has none: its row is gone


def test_a_batch_gives_each_subscription_its_results_in_order():
    changes = rules.batch_changes([(1, answered(500)), (2, answered(200)), (1, answered(200)),
                                   (1, answered(503))])
    assert changes == {1: (True, 1, True), 2: (True, 0, True)}


def test_disabling_looks_at_410s_and_at_failing_subscriptions_without_a_success():
    gone, failing = rules.to_disable([(1, rules.GONE), (2, rules.RETRY), (3, rules.FAILED),
                                      (3, rules.DELIVERED), (1, rules.RETRY)])
    assert (gone, failing) == ({1}, {2})
    assert rules.failing_cutoff_seconds(SETTINGS) == 7200


def test_owners_take_turns_within_the_limit():
    alice = [(sub, "alice", False) for sub in (1, 1, 2, 2)]  # the most overdue
    bob = [(3, "bob", False), (3, "bob", False)]
    assert rules.fair_shares(alice + bob, 4, 2, 10) == {1: 1, 2: 1, 3: 2}


def test_a_subscriptions_room_may_be_set_to_zero():
    candidates = [(1, "a", False), (2, "a", False), (1, "a", False)]
    assert rules.fair_shares(candidates, 10, 5, 10, rooms={1: 0}) == {2: 1}


def test_an_open_breaker_gets_one_its_probe():
    candidates = [(1, "a", True), (1, "a", True), (2, "b", False), (2, "b", False)]
    assert rules.fair_shares(candidates, 10, 5, 10) == {1: 1, 2: 2}


@given(st.lists(st.tuples(st.integers(1, 6), st.integers(0, 3), st.booleans()), max_size=60),
       st.integers(0, 30), st.integers(0, 5), st.integers(0, 8))
def test_a_claims_shares_respect_every_cap(candidates, limit, subscription_room, owner_room):
    # a subscription's breaker and owner are the same in every candidate of it
    first = {sub: (owner, broken) for sub, owner, broken in reversed(candidates)}
    candidates = [(sub, *first[sub]) for sub, _, _ in candidates]
    shares = rules.fair_shares(candidates, limit, subscription_room, owner_room)
    assert sum(shares.values()) <= limit
    per_owner = {}
    for sub, taken in shares.items():
        owner, broken = first[sub]
        assert taken <= (1 if broken else subscription_room)
        assert taken <= sum(1 for c in candidates if c[0] == sub)
        per_owner[owner] = per_owner.get(owner, 0) + taken
    assert all(taken <= owner_room for taken in per_owner.values())


# --- the throttle ---------------------------------------------------------------

def test_a_bucket_refills_at_its_rate_up_to_its_limit():
    assert rules.bucket_level(5, 0, 0.5) == 2.5
    assert rules.bucket_level(5, None, 0) == 5  # never set: full
    assert rules.bucket_level(5, 1, 3600) == 5  # never more than a second's worth
    assert rules.bucket_level(5, 2, -10) == 2  # a refill time ahead adds nothing


def test_a_take_gets_whole_tokens_and_a_give_back_never_overfills():
    assert rules.tokens_taken(2.9, 10) == 2
    assert rules.tokens_taken(4.0, 3) == 3
    assert rules.tokens_taken(0.99, 1) == 0
    assert rules.tokens_given_back(5, 1.5, 2) == 3.5
    assert rules.tokens_given_back(5, 4, 3) == 5
    assert rules.tokens_given_back(5, None, 1) == 5


def test_a_claim_wants_its_room_within_the_limit_or_one_probe():
    assert rules.claim_tokens_wanted(False, 4, 10) == 4
    assert rules.claim_tokens_wanted(False, 40, 10) == 10
    assert rules.claim_tokens_wanted(True, 40, 10) == 1


@given(st.integers(1, 1000), st.one_of(st.none(), st.floats(0, 1000)),
       st.floats(-1e6, 1e6), st.integers(0, 2000))
def test_a_bucket_never_holds_more_than_its_rate_nor_gives_more_than_it_holds(
        rate, tokens, seconds, wanted):
    tokens = None if tokens is None else min(tokens, rate)
    level = rules.bucket_level(rate, tokens, seconds)
    assert 0 <= level <= rate
    taken = rules.tokens_taken(level, wanted)
    assert 0 <= taken <= min(level, wanted)
    assert rules.tokens_given_back(rate, level - taken, taken) <= rate
