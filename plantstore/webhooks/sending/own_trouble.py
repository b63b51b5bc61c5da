"""A process's own trouble, never charged to a receiver.

A job this process cannot send (no key of its own opens the subscription's
secret or bearer token, its lease ran out before the request could be
written, any failure before the first byte left) is given back unsent: no
attempt is counted, no breaker moves, and a process that can send it will.
The process says so once per reason, in one line, and counts every such job
on ``/metrics`` (``plantstore_webhook_not_sent_total``). A worker leaves the
subscriptions it could not sign for to other processes for
``AVOID_SECONDS`` before it claims them again.
"""
import logging
import threading
import time

from ...observability import metrics

log = logging.getLogger(__name__)

AVOID_SECONDS = 60.0
"""How long a worker leaves a subscription it could not sign for to others."""


class NotSent(Exception):
    """This process could not send a job; nothing left it. ``reason`` is the
    short kind counted on ``/metrics``; the message says what is lacking."""

    def __init__(self, reason, message):
        super().__init__(message)
        self.reason = reason


_lock = threading.Lock()
_said = set()  # reasons already logged by this process
_avoided = {}  # subscription id -> time.monotonic() until which it is left to others


def note(job, trouble):
    """Record that ``job`` was not sent for ``trouble`` (a ``NotSent``)."""
    metrics.count_not_sent(trouble.reason)
    with _lock:
        first = trouble.reason not in _said
        _said.add(trouble.reason)
        if trouble.reason == "no key":
            _avoided[job.subscription_id] = time.monotonic() + AVOID_SECONDS
    if first:
        log.error("this process cannot send some deliveries and gives them back unsent "
                  "for a process that can (said once): %s", trouble)


def avoided():
    """The subscriptions this process leaves to other processes for now."""
    now = time.monotonic()
    with _lock:
        for subscription_id in [sid for sid, until in _avoided.items() if until <= now]:
            del _avoided[subscription_id]
        return list(_avoided)
