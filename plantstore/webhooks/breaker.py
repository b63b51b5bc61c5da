"""The per-subscription circuit breaker: when a receiver counts as failing,
and how a batch of attempts moves its state, kept on the subscription row so
that every process and machine sees it.

- A *failure* is an attempt that got no HTTP answer before its deadline
  (timeout, connection refused or reset, the deadline cut it) or a 5xx.
  Any other answer (2xx, 3xx, 4xx) is not a failure.
- ``failure_streak`` counts failures in a row; a 2xx resets it to 0.
- The breaker **opens** when the streak reaches ``breaker_threshold``:
  ``breaker_opened_at`` is set and ``breaker_probe_at`` is now plus
  ``breaker_cooldown``.
- While it is open, creates write the delivery rows but make no attempt, and
  workers make one attempt (a probe) at most every cooldown, with the most
  overdue delivery; the other deliveries wait.
- The breaker **closes** on the first 2xx, whoever got it: the streak, the
  opening time and the probe time are cleared and the waiting deliveries go
  out on their schedule again.

Here, what a batch's results say (``streak_change``); the row is moved by
SQL, in the transaction that writes the batch's outcomes:
``plantstore_record_outcomes`` (migration 0008) on PostgreSQL,
``queue._SQLITE_MOVE_BREAKER`` on SQLite.
"""


def is_failure(result):
    """Whether an attempt's result counts towards opening the breaker."""
    return result.status_code is None or result.status_code >= 500


def is_open(subscription):
    """Whether ``subscription``'s breaker is open (as last read from its row)."""
    return subscription.breaker_opened_at is not None


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
