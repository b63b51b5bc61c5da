"""The delivery rules, decided here and only here; the stores apply them.

Pure functions, no database access (as svix's ``calculate_retry_delay``):

- **outcome**: what an attempt means for its delivery (``decide``):
  delivered on a 2xx, the subscription gone on a 410, else retried after
  the schedule's next step (``retry_delay``, with jitter, at least a 429 or
  503's ``Retry-After`` but never longer than the schedule's largest step),
  or failed after the last one.
- **circuit breaker** (per subscription, kept on its row so every process
  sees it): a *failure* is an attempt with no HTTP answer before its
  deadline, or a 5xx (``is_failure``); ``failure_streak`` counts failures in
  a row and a 2xx resets it; the breaker **opens** when the streak reaches
  ``breaker_threshold`` (opened now, its probe a cooldown away) and
  **closes** on the first 2xx. While open, creates write deliveries but
  attempt none, and workers send one probe per cooldown. A batch's
  results give each subscription a ``BreakerMove`` (``breaker_moves``),
  computed from the row's state when the move depends on it
  (``needs_state``); SQL writes the move as it is.
- **disabling**: a 410 disables its subscription; failures disable it once
  it has had no success for ``disable_after_hours`` (``to_disable`` says
  which subscriptions to look at, ``failing_cutoff_seconds`` the bound).
- **fair claim**: how many due deliveries each subscription gets from one
  claim (``fair_shares``): a few per subscription, its owner taking turns
  with the other owners, one (the probe) while its breaker is open.
- **throttle**: a receiver's token bucket (``webhooks/engine/throttle.py``): how
  full it is now (``bucket_level``), what a take gets (``tokens_taken``),
  what a give-back leaves (``tokens_given_back``), what a claim asks for
  (``claim_tokens_wanted``). SQLite's store calls them; PostgreSQL's
  functions (migration 0011) apply the same rules in their statements.
"""
import collections
import dataclasses
import random

DELIVERED = "delivered"  # a 2xx: done
RETRY = "retry"          # a failure with retries left: scheduled again
FAILED = "failed"        # a failure after the last retry: given up
GONE = "gone"            # a 410: the subscription is disabled, its queue failed
FAILING = "failing"      # disabled for failing too long (GONE's sibling reason)

STATUS_AFTER = {DELIVERED: "delivered", RETRY: "pending", FAILED: "failed", GONE: "failed"}
"""A delivery's status after an outcome of each kind."""

JITTER = 0.1
"""Each scheduled delay is spread by up to this fraction either way, so a
receiver coming back is not hit by every retry in the same second."""

# What a BreakerMove does to a timestamp of the breaker.
KEEP, CLEAR, NOW, LATER = "keep", "clear", "now", "later"


@dataclasses.dataclass(frozen=True)
class Outcome:
    """The decision about one attempt: its kind, and in how many seconds to retry."""
    kind: str
    retry_in: float | None = None

    @property
    def status(self):
        """The delivery's status after it."""
        return STATUS_AFTER[self.kind]


def retry_delay(attempts_made, retry_after, settings, uniform=random.uniform):
    """Seconds until the next try after ``attempts_made`` attempts, or None
    (no retry left). ``retry_after``: a Retry-After's seconds, or None."""
    if attempts_made > len(settings.retry_schedule):
        return None
    delay = settings.retry_schedule[attempts_made - 1] * uniform(1 - JITTER, 1 + JITTER)
    if retry_after is not None:
        delay = max(delay, min(retry_after, settings.longest_delay))
    return delay


def decide(attempts_made, result, settings):
    """The outcome of an attempt, the ``attempts_made``-th of its delivery."""
    if result.ok:
        return Outcome(DELIVERED)
    if result.status_code == 410:
        return Outcome(GONE)
    delay = retry_delay(attempts_made, result.retry_after, settings)
    return Outcome(FAILED) if delay is None else Outcome(RETRY, delay)


# --- the circuit breaker --------------------------------------------------------

def is_failure(result):
    """Whether an attempt's result counts towards opening the breaker."""
    return result.status_code is None or result.status_code >= 500


def streak_change(results):
    """(closed, failures): whether the results, in order, include a 2xx, and
    the failures after the last one (or in all of them when there is none)."""
    closed, failures = False, 0
    for result in results:
        if result.ok:
            closed, failures = True, 0
        elif is_failure(result):
            failures += 1
    return closed, failures


@dataclasses.dataclass(frozen=True)
class BreakerState:
    """A subscription's breaker as its row holds it."""
    streak: int
    is_open: bool


@dataclasses.dataclass(frozen=True)
class BreakerMove:
    """What to write on a subscription's row: its streak, its opening time
    and probe time (KEEP, CLEAR, NOW / LATER: now plus the cooldown), and
    whether it just succeeded (its last success is now)."""
    streak: int
    opened: str
    probe: str
    succeeded: bool


def needs_state(closed, failures):
    """Whether a move depends on the row's state: only failures after no 2xx
    add to the streak the row holds."""
    return not closed and failures > 0


def breaker_move(closed, failures, succeeded, threshold, state=None):
    """The move of a subscription whose batch gave (closed, failures,
    succeeded); ``state`` (its row's ``BreakerState``) when ``needs_state``.
    None when nothing changes."""
    if not (closed or failures or succeeded):
        return None
    if needs_state(closed, failures) and state is None:
        raise ValueError("this move depends on the breaker's state")
    streak = failures if closed else state.streak + failures
    opens = streak >= threshold
    if opens and (closed or not state.is_open):
        opened = NOW
    else:
        opened = CLEAR if closed else KEEP
    probe = LATER if opens else (CLEAR if closed else KEEP)
    return BreakerMove(streak, opened, probe, succeeded)


def batch_changes(attempts):
    """Per subscription, in the order the attempts ended: (closed, failures,
    succeeded), from ``(subscription_id, result)`` pairs."""
    results = collections.defaultdict(list)
    for subscription_id, result in attempts:
        results[subscription_id].append(result)
    return {subscription_id: (*streak_change(found), any(r.ok for r in found))
            for subscription_id, found in results.items()}


def breaker_moves(changes, states, threshold):
    """{subscription id: BreakerMove} of a batch's ``changes`` (``batch_changes``),
    ``states`` holding the rows' state where a move needs it (a subscription
    missing from it was deleted: it gets none)."""
    moves = {}
    for subscription_id, (closed, failures, succeeded) in changes.items():
        if needs_state(closed, failures) and subscription_id not in states:
            continue  # its row is gone (deleted meanwhile): nothing to move
        move = breaker_move(closed, failures, succeeded, threshold,
                            states.get(subscription_id))
        if move is not None:
            moves[subscription_id] = move
    return moves


# --- disabling ------------------------------------------------------------------

def to_disable(decided):
    """(gone, failing) subscription ids of written outcomes ``(subscription id,
    kind)``: those that answered 410, and those to check for failing too long
    (a failure and no success in the batch)."""
    gone = {subscription_id for subscription_id, kind in decided if kind == GONE}
    failed = {subscription_id for subscription_id, kind in decided if kind in (RETRY, FAILED)}
    succeeded = {subscription_id for subscription_id, kind in decided if kind == DELIVERED}
    return gone, failed - succeeded - gone


def failing_cutoff_seconds(settings):
    """A failing subscription is disabled when it has had no success (nor was
    made or enabled again) in this many seconds."""
    return settings.disable_after_hours * 3600


# --- the fair claim -------------------------------------------------------------

def fair_shares(candidates, limit, subscription_room, owner_room, rooms=None, owner_rooms=None):
    """{subscription id: how many} one claim takes, of ``candidates``:
    ``(subscription id, owner key, breaker open)`` of each due delivery, most
    overdue first.

    A subscription gets at most ``rooms.get(id, subscription_room)`` (1, its
    probe, while its breaker is open); an owner at most
    ``owner_rooms.get(key, owner_room)``; owners take turns (each owner's
    first delivery, then each one's second, ...) until ``limit``.
    """
    rooms, owner_rooms = rooms or {}, owner_rooms or {}
    by_subscription = collections.Counter()
    per_owner = collections.defaultdict(list)  # owner -> [(nth of its receiver, rank, id)]
    for rank, (subscription_id, owner_key, breaker_open) in enumerate(candidates):
        room = 1 if breaker_open else rooms.get(subscription_id, subscription_room)
        if by_subscription[subscription_id] >= room:
            continue
        by_subscription[subscription_id] += 1
        per_owner[owner_key].append((by_subscription[subscription_id], rank, subscription_id))
    turns = []  # (owner's turn, how overdue, subscription)
    for owner_key, entries in per_owner.items():
        entries.sort()
        turns.extend((turn, rank, subscription_id) for turn, (_, rank, subscription_id)
                     in enumerate(entries[:owner_rooms.get(owner_key, owner_room)]))
    turns.sort()
    return collections.Counter(subscription_id for _, _, subscription_id in turns[:limit])


# --- the throttle ---------------------------------------------------------------

def bucket_level(rate, tokens, seconds_since_refill):
    """A throttled receiver's tokens now: what its bucket held (``tokens``;
    None: full), refilled at ``rate`` a second since, at most ``rate``."""
    held = rate if tokens is None else tokens
    return min(float(rate), held + rate * max(0.0, seconds_since_refill))


def tokens_taken(level, wanted):
    """How many whole tokens a take of ``wanted`` gets from a bucket at ``level``."""
    return min(int(level), wanted)


def tokens_given_back(rate, tokens, count):
    """A bucket's tokens after ``count`` taken but not spent are put back:
    at most ``rate`` (a full bucket)."""
    return min(float(rate), (rate if tokens is None else tokens) + count)


def claim_tokens_wanted(breaker_open, room, limit):
    """The tokens a claim takes for a throttled receiver: at most what it
    could give it (its ``room``, at most the claim's ``limit``; one, the
    probe, while its breaker is open)."""
    return 1 if breaker_open else min(room, limit)
