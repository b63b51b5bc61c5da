"""One attempt of a process's, from the slot it holds to its outcome handed
to the writer: the worker and the web sender both make theirs here.

Before it starts, an attempt is checked against its subscription as it is
now: a change a user makes (a URL, a bearer token, a secret rotated, a rate
limit, a disable, a delete) binds every attempt that starts after its
answer. A job whose configuration was read (by its claim or create, or by
this process for another attempt) at most ``FRESH_SECONDS`` before it
starts goes as it is; any other is read again first (one query per
subscription and process at most every ``FRESH_SECONDS``). Then it is sent
with the subscription's current URL, token and secrets; given back unsent
when the subscription is gone or disabled, or was throttled since the job
was claimed without a token (it goes through the throttle on its next
claim). Once its connection is made (a receiver may be slow to accept),
just before its request is written, it is checked again the same way
(``check_once_connected``): a job whose subscription changed meanwhile is
given back unsent, to go with the new configuration. So no request with a
replaced configuration is written later than ``FRESH_SECONDS`` after the
change was answered.

A job this process cannot send (``own_trouble``) is given back unsent: no
attempt, no breaker move.
"""
import dataclasses
import time

from ...db import DATABASE_FAILURES, database
from ...observability import metrics
from ..engine import queue
from . import http_post, own_trouble
from .deadline import NotWritten

FINISH_MARGIN_SECONDS = 10
"""How long past the attempt deadline a stopping process waits for the
outcomes of its last attempts to be written."""

WRITE_WAIT_SECONDS = 10
"""Longest a failed attempt keeps its slot waiting for its outcome to be written."""

FRESH_SECONDS = 0.05
"""Longest a subscription's configuration, as read, is used to start attempts."""

MOST_REMEMBERED = 4096
"""Subscriptions whose configuration a process remembers between reads."""

SENT_WITH = ("url", "bearer_token", "secret", "retired_secrets")
"""What of its subscription an attempt is sent with (``Job``'s fields)."""


class SubscriptionsNow:
    """The subscriptions' sending settings as this process last read them."""

    def __init__(self):
        # (the bound database, subscription id) -> (time.monotonic() before
        # the read, row or None)
        self._read = {}

    def of(self, subscription_id):
        """Its row as read at most ``FRESH_SECONDS`` ago (None: it is gone),
        and the ``time.monotonic()`` before that read."""
        key = (id(database.obj), subscription_id)
        read = self._read.get(key)
        if read is not None and time.monotonic() - read[0] <= FRESH_SECONDS:
            return read
        read_at = time.monotonic()
        row = queue.sending_settings([subscription_id]).get(subscription_id)
        if len(self._read) >= MOST_REMEMBERED:
            self._read.clear()
        self._read[key] = (read_at, row)
        return read_at, row


SUBSCRIPTIONS_NOW = SubscriptionsNow()


def current(job, token_taken, read_at=None):
    """``job`` as its subscription is now, or None when it must not start:
    the subscription is gone or disabled, or throttled while this job holds
    no token (``token_taken``: one was taken for it, or none was needed);
    and when what it is sent with was read (a ``time.monotonic()``). Read
    again unless ``read_at`` (by default, its lease) is at most
    ``FRESH_SECONDS`` ago."""
    read_at = job.leased_at if read_at is None else read_at
    if time.monotonic() - read_at <= FRESH_SECONDS:
        return job, read_at
    read_at, row = SUBSCRIPTIONS_NOW.of(job.subscription_id)
    if row is None or not row["is_active"] or (row["rate_limit"] is not None
                                               and not token_taken):
        return None, read_at
    changed = {name: row[name] for name in SENT_WITH if row[name] != getattr(job, name)}
    return (dataclasses.replace(job, **changed) if changed else job), read_at


class ChangedWhileConnecting(NotWritten):
    """The job's subscription changed, or went, while its attempt connected."""


def check_once_connected(job, token_taken, read_at):
    """The check of ``job`` (as read at ``read_at``) once its connection is
    made: ``ChangedWhileConnecting`` unless its subscription is still as it
    was read; ``NotSent`` when it could not be read."""
    def still_current():
        try:
            now, _ = current(job, token_taken, read_at)
        except DATABASE_FAILURES as error:
            raise own_trouble.NotSent(
                "database unavailable", f"a subscription could not be read: {error}") from None
        if now is not job:
            raise ChangedWhileConnecting("its subscription changed while it connected")
    return still_current


def attempt_and_put(job, settings, writer, context=None, token_taken=False):
    """Attempt ``job`` (as its subscription is now) and have its outcome
    written; after a failure, wait (at most WRITE_WAIT_SECONDS) until it is,
    so that the caller frees the slot only once the next attempt at that
    receiver would see what the failure did (the breaker, a 410's
    disabling). A job that must not start now, or that this process cannot
    send, is given back unsent. Whether it was delivered."""
    try:
        now, read_at = current(job, token_taken)
    except DATABASE_FAILURES as error:
        own_trouble.note(job, own_trouble.NotSent(
            "database unavailable", f"a subscription could not be read: {error}"))
        writer.give_back(job)
        return False
    if now is None:
        metrics.count_not_sent("configuration changed")
        writer.give_back(job)
        return False
    try:
        result = http_post.attempt(now, settings, context,
                                check_once_connected(now, token_taken, read_at))
    except ChangedWhileConnecting:
        metrics.count_not_sent("configuration changed")
        writer.give_back(now)
        return False
    except own_trouble.NotSent as trouble:
        own_trouble.note(now, trouble)
        writer.give_back(now)
        return False
    written = writer.put(now, result)
    if not result.ok:
        written.wait(WRITE_WAIT_SECONDS)
    return result.ok
