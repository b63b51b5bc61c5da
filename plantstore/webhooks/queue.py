"""The delivery queue: the one module that changes a delivery's state.

A delivery is one event for one subscription. It is *pending* until a 2xx
(*delivered*), until its last retry fails or its subscription is disabled
(*failed*). Its life, all here: enqueued with the plant that caused it
(``store_plant``) or as a test event; claimed by a worker (``claim``) or
taken for a re-send (``take_for_resend``); completed, retried or failed
(``record``); given back unsent (``give_back``); failed with its
subscription (``disable``); queued again (``recover``); purged after its
retention (``purge_batch``).

A sender holds a delivery through a **lease**: ``locked_until``, computed
by the database's clock, and ``lease``, a token every claim bumps. An
outcome or a give-back is written only under the token its sender holds, so
a sender whose lease ran out (and whose delivery another claimed) writes
nothing. An attempt starts only while its lease has the attempt's deadline
plus ``LEASE_MARGIN_SECONDS`` left, counted from before the claim was sent
on this process's monotonic clock (``Job.lease_left``): no other sender can
take the row while the attempt is under way, whatever the hosts' clocks say.

On PostgreSQL each operation is one statement (``queue_sql``; the claim,
the outcome batch and a create's store call functions of migrations 0008
and 0009); on SQLite (one host) the same operations are peewee queries in
one transaction, and SQL text (``db.Statement``) where a create or an
outcome runs them.
"""
import collections
import contextlib
import dataclasses
import logging
import random
import time
import uuid

from peewee import fn

from .. import clock, metrics
from ..auth import TokenRefused
from ..db import Statement, database, is_sqlite
from ..idempotency import KeyTaken
from ..models import Attempt, Delivery, Subscription
from . import backlog, breaker, queue_sql
from .audience import HEARING_ABOUT
from .secrets import signing_secrets

log = logging.getLogger(__name__)

DELIVERED = "delivered"  # a 2xx: done
RETRY = "retry"          # a failure with retries left: scheduled again
FAILED = "failed"        # a failure after the last retry: given up
GONE = "gone"            # a 410: the subscription is disabled, its queue failed

LOG_LEVELS = {DELIVERED: logging.DEBUG, RETRY: logging.INFO,
              FAILED: logging.WARNING, GONE: logging.WARNING}

JITTER = 0.1
"""Each scheduled delay is spread by up to this fraction either way, so a
receiver coming back is not hit by every retry in the same second."""

LEASE_MARGIN_SECONDS = 1.0
"""How much longer than its attempt's deadline a lease must still last for
the attempt to start: its outcome is written inside the lease."""

PURGE_BATCH = 500
"""Deliveries one purge transaction deletes, so it never holds locks for long."""

TEST_EVENT = "plant.test"
TEST_PAYLOAD = '{"id": 0, "name": "Example plant (a test event from plantstore)", "tag": "test"}'
"""The example New Plant body of a test event (a plant that does not exist)."""


@dataclasses.dataclass(frozen=True)
class Job:
    """A leased delivery: what one attempt needs, and the lease it holds."""
    delivery_id: int
    message_id: str
    payload: str
    attempts: int  # made before this one
    lease: int  # the token the outcome is written under
    traceparent: str | None  # the trace of the request that queued it
    subscription_id: int
    owner_id: int | None  # None: an operator's subscription
    url: str
    bearer_token: str | None
    secret: str
    retired_secrets: str | None
    breaker_open: bool
    leased_at: float  # time.monotonic() before the lease was taken
    lease_seconds: float

    @classmethod
    def from_row(cls, row, leased_at, lease_seconds):
        """The job of a row of ``queue_sql.JOB_COLUMNS``."""
        return cls(*row, leased_at=leased_at, lease_seconds=lease_seconds)

    @property
    def restricted(self):
        """An API subscription: sent only to permitted addresses."""
        return self.owner_id is not None

    @property
    def owner_key(self):
        """Whose share of the sending slots it uses (operators are owner 0)."""
        return self.owner_id or 0

    def lease_left(self):
        """Seconds its lease surely still lasts, by this process's clock."""
        return self.leased_at + self.lease_seconds - time.monotonic()

    def may_start(self, send_bound):
        """Whether an attempt started now ends, with its outcome, inside the lease."""
        return self.lease_left() > send_bound + LEASE_MARGIN_SECONDS

    def signing_secrets(self):
        """The secrets that sign its message: the current one first."""
        return signing_secrets(self)


def _jobs_of(delivery_ids, leased_at, settings):
    """The jobs of deliveries just leased (SQL text: as a peewee query, its
    compiling cost more than a SQLite claim's other work together)."""
    ids = ", ".join([database.obj.param] * len(delivery_ids))
    rows = database.execute_sql(
        f"SELECT {queue_sql.JOB_COLUMNS} FROM delivery d "
        f"JOIN subscription s ON s.id = d.subscription_id WHERE d.id IN ({ids}) ORDER BY d.id",
        list(delivery_ids)).fetchall()
    return [Job.from_row(row, leased_at, settings.lease_seconds) for row in rows]


# --- enqueue -----------------------------------------------------------------

def store_plant(plant, event_type, payload, settings, traceparent=None, key_claim=None,
                token=None):
    """Store ``plant`` with one pending delivery per active subscription that
    hears about it (see ``audience``), together: one statement on
    PostgreSQL, one transaction on SQLite (nested in the caller's, if any).
    IntegrityError if the plant's id is taken. On PostgreSQL the statement
    also checks ``token`` (an ``auth.PresentedToken``), when given: the
    plant's owner is its user, and if it is not valid nothing is written
    (``TokenRefused``); and it claims ``key_claim`` (an
    ``idempotency.KeyClaim``) and stores its answer; if the key is taken,
    nothing is written and ``KeyTaken`` says what was found.

    Deliveries to receivers whose breaker is closed are leased to the calling
    process, which attempts them once committed; workers leave them alone
    until the lease runs out, so a process that dies after the commit delays
    them but never loses them. Returns those jobs.
    """
    leased_at = time.monotonic()
    if not is_sqlite():
        values = {"id": plant.id, "owner": plant.owner_id, "name": plant.name,
                  "tag": plant.tag, "event": event_type, "payload": payload,
                  "traceparent": traceparent, "lease_seconds": settings.lease_seconds,
                  "token_digest": token and token.digest, "scope": token and token.scope}
        if key_claim is None:
            rows = database.execute_sql(queue_sql.STORE_PLANT_WITH_DELIVERIES,
                                        values).fetchall()
            if not rows:
                raise TokenRefused()
        else:
            rows = _store_keyed(values, key_claim)
        jobs = [Job.from_row(row[1:], leased_at, settings.lease_seconds)
                for row in rows if row[1] is not None]
    else:
        with database.atomic():
            _SQLITE_INSERT_PLANT.rows(plant.id, plant.owner_id, plant.name, plant.tag,
                                      clock.now())
            jobs = [_sqlite_enqueue(subscription, event_type, payload, traceparent,
                                    leased_at, settings)
                    for subscription in _SQLITE_AUDIENCE.rows(plant.owner_id)]
    to_send = [job for job in jobs if not job.breaker_open]
    for _ in range(len(jobs) - len(to_send)):
        metrics.count_left_to_worker("breaker open")
        backlog.note_left_to_workers()
    return to_send


def _store_keyed(values, key_claim):
    """Run the keyed store; its rows without the key's columns (``TokenRefused``
    or ``KeyTaken`` if it wrote nothing)."""
    rows = database.execute_sql(queue_sql.STORE_KEYED_PLANT_WITH_DELIVERIES, {
        **values, "key": key_claim.key, "fingerprint": key_claim.fingerprint,
        "ttl_seconds": key_claim.ttl_seconds, "status": key_claim.status,
        "content_type": key_claim.content_type, "body": key_claim.body}).fetchall()
    if not rows:
        raise TokenRefused()
    claimed, held, *found = rows[0][-queue_sql.KEY_COLUMNS:]
    if not claimed:
        raise KeyTaken(held, *found)
    return [row[:-queue_sql.KEY_COLUMNS] for row in rows]


# SQL text (see db.Statement): compiling these as peewee queries cost a
# create on SQLite more than half its CPU (860 against 360 µs, in-process).
_SQLITE_INSERT_PLANT = Statement(
    "INSERT INTO plant (id, owner_id, name, tag, created_at) VALUES ({p}, {p}, {p}, {p}, {p})")
_SQLITE_AUDIENCE = Statement(
    "SELECT s.id, s.owner_id, s.url, s.bearer_token, s.secret, s.retired_secrets, "
    f"s.breaker_opened_at IS NOT NULL FROM {HEARING_ABOUT.format(owner='{p}')} ORDER BY s.id")
_SQLITE_INSERT_DELIVERY = Statement(
    "INSERT INTO delivery (subscription_id, message_id, event_type, payload, status, attempts, "
    "lease, next_attempt_at, locked_until, created_at, traceparent) "
    "VALUES ({p}, {p}, {p}, {p}, {p}, 0, 1, {p}, {p}, {p}, {p})")


def _sqlite_enqueue(subscription, event_type, payload, traceparent, leased_at, settings):
    """Insert the delivery of one ``_SQLITE_AUDIENCE`` row; its job (leased
    unless the receiver's breaker is open)."""
    breaker_open = subscription[-1]
    message_id, now = f"msg_{uuid.uuid4().hex}", clock.now()
    lease_until = None if breaker_open else clock.after(settings.lease_seconds)
    delivery_id = _SQLITE_INSERT_DELIVERY.execute(
        subscription[0], message_id, event_type, payload, Delivery.PENDING, now,
        lease_until, now, traceparent).lastrowid
    return Job(delivery_id, message_id, payload, 0, 1, traceparent, *subscription[:-1],
               bool(breaker_open), leased_at=leased_at, lease_seconds=settings.lease_seconds)


def _insert_delivery(subscription_id, event_type, payload, traceparent=None,
                     lease_seconds=None):
    """One pending delivery, due now, leased for ``lease_seconds`` if given."""
    return Delivery.insert(
        subscription=subscription_id, message_id=f"msg_{uuid.uuid4().hex}",
        event_type=event_type, payload=payload, status=Delivery.PENDING, lease=1,
        next_attempt_at=clock.now(), created_at=clock.now(), traceparent=traceparent,
        locked_until=None if lease_seconds is None else clock.after(lease_seconds),
    ).execute()


def enqueue_test_event(subscription_id):
    """Queue a signed example New Plant event for the subscription, due now
    (the workers send it like any other); returns the delivery."""
    with database.atomic():
        return Delivery.get_by_id(_insert_delivery(subscription_id, TEST_EVENT, TEST_PAYLOAD))


# --- claim -------------------------------------------------------------------

def claim(limit, settings, receiver_room, owner_room, rooms=None, owner_rooms=None,
          due_by=None):
    """Lease up to ``limit`` deliveries due by ``due_by`` (a time read from
    the database; default: now) to this process, fairly; their jobs.

    At most ``rooms.get(subscription id, receiver_room)`` per subscription
    and ``owner_rooms.get(owner key, owner_room)`` per owner, the owners
    taking turns; a subscription whose breaker is open gets one, its probe,
    when the probe is due (and only one claim gets it).
    """
    rooms, owner_rooms = rooms or {}, owner_rooms or {}
    leased_at = time.monotonic()
    if not is_sqlite():
        rows = database.execute_sql(queue_sql.CLAIM, {
            "room_ids": list(rooms), "rooms": list(rooms.values()),
            "owner_keys": list(owner_rooms), "owner_rooms": list(owner_rooms.values()),
            "receiver_room": receiver_room, "owner_room": owner_room, "limit": limit,
            "due_by": due_by,
            "cooldown": settings.breaker_cooldown,
            "lease_seconds": settings.lease_seconds}).fetchall()
        return [Job.from_row(row, leased_at, settings.lease_seconds) for row in rows]
    with database.atomic():
        most = max([receiver_room, *rooms.values()])
        chosen = _fair_choice(_sqlite_candidates(most, due_by), limit, receiver_room, owner_room,
                              rooms, owner_rooms, settings)
        if not chosen:
            return []
        ids = ", ".join("?" * len(chosen))
        database.execute_sql(f"UPDATE delivery SET lease = lease + 1, locked_until = ? "
                             f"WHERE id IN ({ids})",
                             [clock.after(settings.lease_seconds), *chosen])
        return _jobs_of(chosen, leased_at, settings)


_SQLITE_RECEIVERS = """
SELECT id, coalesce(owner_id, 0), breaker_opened_at IS NOT NULL FROM subscription
WHERE is_active AND (breaker_opened_at IS NULL OR breaker_probe_at <= :now)
"""

_SQLITE_DUE = """
SELECT id, next_attempt_at FROM delivery
WHERE subscription_id = :subscription AND status = 'pending' AND next_attempt_at <= :due_by
  AND (locked_until IS NULL OR locked_until <= :now)
ORDER BY next_attempt_at, id LIMIT :most
"""


def _sqlite_candidates(most_per_receiver, due_by):
    """(delivery id, subscription id, owner key, breaker open) of the due,
    unleased deliveries of active subscriptions, at most ``most_per_receiver``
    of each (read through ``delivery_due_per_subscription``, so a claim
    costs the same however long the backlog), most overdue first."""
    now = clock.now()
    due = []
    for subscription_id, owner_key, breaker_open in database.execute_sql(
            _SQLITE_RECEIVERS, {"now": now}).fetchall():
        rows = database.execute_sql(_SQLITE_DUE, {
            "subscription": subscription_id, "due_by": due_by or now, "now": now,
            "most": most_per_receiver}).fetchall()
        due.extend((next_attempt_at, delivery_id, subscription_id, owner_key, breaker_open)
                   for delivery_id, next_attempt_at in rows)
    due.sort(key=lambda row: row[:2])
    return [row[1:] for row in due]


def _fair_choice(candidates, limit, receiver_room, owner_room, rooms, owner_rooms,
                 settings):
    """The claim's choice on SQLite, as PostgreSQL's ``plantstore_claim`` makes it."""
    by_receiver = collections.Counter()
    per_owner = collections.defaultdict(list)  # owner -> [(nth of its receiver, id)]
    probes = set()
    for delivery_id, subscription_id, owner_key, breaker_open in candidates:
        room = 1 if breaker_open else rooms.get(subscription_id, receiver_room)
        if by_receiver[subscription_id] >= room:
            continue
        by_receiver[subscription_id] += 1
        per_owner[owner_key].append((by_receiver[subscription_id], delivery_id,
                                     subscription_id if breaker_open else None))
    turns = []
    for owner_key, entries in per_owner.items():
        entries.sort(key=lambda entry: entry[0])  # stable: most overdue first within a turn
        for turn, entry in enumerate(entries[:owner_rooms.get(owner_key, owner_room)]):
            turns.append((turn, entry))
    turns.sort(key=lambda pair: pair[0])
    chosen = []
    for _, (_, delivery_id, probed) in turns[:limit]:
        if probed is not None:
            if probed in probes or not _take_probe(probed, settings):
                continue
            probes.add(probed)
        chosen.append(delivery_id)
    return chosen


def _take_probe(subscription_id, settings):
    """Reserve the next probe of an open breaker; whether this claim got it."""
    return (Subscription.update(breaker_probe_at=clock.after(settings.breaker_cooldown))
            .where(Subscription.id == subscription_id,
                   Subscription.breaker_probe_at <= clock.now())
            .execute()) == 1


class ResendRefused(Exception):
    """A delivery cannot be re-sent now; the message says why."""


def take_for_resend(delivery_id, settings):
    """Lease one failed (or waiting) delivery for an immediate re-send; its job.

    It starts over on the retry schedule: if this attempt fails, the retries
    follow as for a new event, under the same webhook-id.
    """
    leased_at = time.monotonic()
    with database.atomic():
        delivery = Delivery.get_or_none(Delivery.id == delivery_id)
        if delivery is None:
            raise ResendRefused(f"no delivery with id {delivery_id}")
        if delivery.status == Delivery.DELIVERED:
            raise ResendRefused(f"delivery {delivery_id} was already delivered "
                                f"on {delivery.delivered_at:%Y-%m-%d %H:%M:%S} UTC")
        subscription = delivery.subscription
        if not subscription.is_active:
            raise ResendRefused(
                f"subscription {subscription.id} is disabled "
                f"({subscription.disabled_reason or 'no reason recorded'}); "
                f"enable it first with `plantstore webhooks enable {subscription.id}`")
        now = clock.now()
        taken = (Delivery.update(status=Delivery.PENDING, attempts=0, next_attempt_at=now,
                                 lease=Delivery.lease + 1,
                                 locked_until=clock.after(settings.lease_seconds))
                 .where(Delivery.id == delivery_id, Delivery.status != Delivery.DELIVERED,
                        Delivery.locked_until.is_null() | (Delivery.locked_until <= now))
                 .execute())
        if not taken:
            raise ResendRefused(f"delivery {delivery_id} is being sent right now; "
                                "try again in a moment")
        return _jobs_of([delivery_id], leased_at, settings)[0]


# --- outcomes ----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Outcome:
    """The decision about one attempt: its kind, and in how many seconds to retry."""
    kind: str
    retry_in: float | None = None

    @property
    def status(self):
        """The delivery's status after it."""
        return {DELIVERED: Delivery.DELIVERED, RETRY: Delivery.PENDING}.get(
            self.kind, Delivery.FAILED)


def retry_delay(attempts_made, result, settings):
    """Seconds until the next try after ``attempts_made`` attempts, or None.

    The schedule gives the delay (with jitter); a Retry-After from a 429 or
    503 makes it at least that long, but never longer than the schedule's
    largest step.
    """
    if attempts_made > len(settings.retry_schedule):
        return None
    delay = settings.retry_schedule[attempts_made - 1]
    delay *= random.uniform(1 - JITTER, 1 + JITTER)
    if result.retry_after is not None:
        delay = max(delay, min(result.retry_after, settings.longest_delay))
    return delay


def decide(attempts_made, result, settings):
    """The outcome of an attempt, the ``attempts_made``-th of its delivery."""
    if result.ok:
        return Outcome(DELIVERED)
    if result.status_code == 410:
        return Outcome(GONE)
    delay = retry_delay(attempts_made, result, settings)
    return Outcome(FAILED) if delay is None else Outcome(RETRY, delay)


def record(attempts, settings):
    """Decide what each ``(job, result)`` means and write them all at once;
    the outcome kinds, in order (None where the lease was lost meanwhile:
    the delivery was claimed by another sender, or deleted with its
    subscription)."""
    decided = [(job, result, decide(job.attempts + 1, result, settings))
               for job, result in attempts]
    # All delivered: one statement. A failure may disable its subscription
    # too, in the same transaction, so nobody sees the attempt without that.
    failed = any(outcome.kind != DELIVERED for _, _, outcome in decided)
    with database.connection_context(), (
            database.atomic() if failed else contextlib.nullcontext()):
        written = (_write_postgresql if not is_sqlite() else _write_sqlite)(decided, settings)
        _disable_failing(decided, written, settings)
        missing = [job.delivery_id for job, _, _ in decided if job.delivery_id not in written]
        still_there = set()
        if missing:  # rare: tell a lost lease from a deleted subscription
            still_there = {row[0] for row in Delivery.select(Delivery.id)
                           .where(Delivery.id.in_(missing)).tuples()}
    kinds = []
    for job, result, outcome in decided:
        if job.delivery_id not in written:
            kinds.append(None)
            why = ("its lease ran out and another sender claimed it"
                   if job.delivery_id in still_there
                   else "it was deleted with its subscription")
            log.warning("delivery %s (%s): outcome (%s) not written: %s", job.delivery_id,
                        job.message_id, result.summary() or "delivered", why)
            continue
        kinds.append(outcome.kind)
        metrics.count_delivery(outcome.kind)
        log.log(LOG_LEVELS[outcome.kind], "delivery %s (%s) to subscription %s: %s%s",
                job.delivery_id, job.message_id, job.subscription_id, outcome.kind,
                "" if result.ok else f" ({result.summary()})")
    return kinds


def _receiver_changes(decided):
    """Per subscription, in the order the attempts ended: (closed, failures,
    succeeded) for the breaker and the last success."""
    results = collections.defaultdict(list)
    for job, result, _ in decided:
        results[job.subscription_id].append(result)
    return {subscription_id: (*breaker.streak_change(found), any(r.ok for r in found))
            for subscription_id, found in results.items()}


def _last_error(result):
    """What a delivery keeps of its last attempt: nothing once delivered."""
    return None if result.ok else result.summary()


def _write_postgresql(decided, settings):
    receivers = _receiver_changes(decided)
    rows = database.execute_sql(queue_sql.RECORD_OUTCOMES, {
        "ids": [job.delivery_id for job, _, _ in decided],
        "leases": [job.lease for job, _, _ in decided],
        "statuses": [outcome.status for _, _, outcome in decided],
        "last_errors": [_last_error(result) for _, result, _ in decided],
        "errors": [result.error for _, result, _ in decided],
        "retry_in": [outcome.retry_in for _, _, outcome in decided],
        "started_at": [result.started_at for _, result, _ in decided],
        "status_codes": [result.status_code for _, result, _ in decided],
        "durations": [result.duration_ms for _, result, _ in decided],
        "receiver_ids": list(receivers),
        "closed": [closed for closed, _, _ in receivers.values()],
        "failures": [failures for _, failures, _ in receivers.values()],
        "succeeded": [succeeded for _, _, succeeded in receivers.values()],
        "threshold": settings.breaker_threshold, "cooldown": settings.breaker_cooldown,
    }).fetchall()
    return {delivery_id for delivery_id, in rows}


# SQL text (see db.Statement): a web process on SQLite writes every
# outcome; as peewee queries their compiling doubled a batch's CPU.
_SQLITE_MOVE_ON = Statement(
    "UPDATE delivery SET status = {p}, attempts = attempts + 1, last_error = {p}, "
    "locked_until = NULL, delivered_at = {p}, next_attempt_at = coalesce({p}, next_attempt_at) "
    "WHERE id = {p} AND lease = {p}")
_SQLITE_LOG_ATTEMPT = Statement(
    "INSERT INTO attempt (delivery_id, started_at, status_code, error, duration_ms) "
    "VALUES ({p}, {p}, {p}, {p}, {p})")
# The rules of breaker.py for one subscription's batch, written as
# plantstore_record_outcomes (migration 0008) applies them on PostgreSQL;
# every SET reads the row as it was. As a peewee UPDATE, compiled per batch,
# a batch of 7 outcomes took 1.3x the CPU (in process, 4 alternating runs).
_SQLITE_MOVE_BREAKER = """
UPDATE subscription SET
    failure_streak = CASE WHEN :closed THEN :failures ELSE failure_streak + :failures END,
    breaker_opened_at = CASE
        WHEN CASE WHEN :closed THEN :failures ELSE failure_streak + :failures END >= :threshold
             AND (:closed OR breaker_opened_at IS NULL) THEN :now
        WHEN :closed THEN NULL
        ELSE breaker_opened_at END,
    breaker_probe_at = CASE
        WHEN CASE WHEN :closed THEN :failures ELSE failure_streak + :failures END >= :threshold
            THEN :next_probe
        WHEN :closed THEN NULL
        ELSE breaker_probe_at END,
    last_success_at = CASE WHEN :succeeded THEN :now ELSE last_success_at END
WHERE id = :id
"""


def _write_sqlite(decided, settings):
    written = set()
    with database.atomic():
        for job, result, outcome in decided:
            moved_on = _SQLITE_MOVE_ON.execute(
                outcome.status, _last_error(result),
                clock.now() if outcome.kind == DELIVERED else None,
                None if outcome.retry_in is None else clock.after(outcome.retry_in),
                job.delivery_id, job.lease).rowcount
            if moved_on:
                written.add(job.delivery_id)
                _SQLITE_LOG_ATTEMPT.execute(job.delivery_id, result.started_at,
                                            result.status_code, result.error,
                                            result.duration_ms)
        now, next_probe = clock.now(), clock.after(settings.breaker_cooldown)
        for subscription_id, (closed, failures, succeeded) in _receiver_changes(decided).items():
            if closed or failures or succeeded:
                database.execute_sql(_SQLITE_MOVE_BREAKER, {
                    "id": subscription_id, "closed": closed, "failures": failures,
                    "succeeded": succeeded, "threshold": settings.breaker_threshold,
                    "now": now, "next_probe": next_probe})
    return written


def _disable_failing(decided, written, settings):
    """Disable the subscriptions that answered 410, and those failing for
    longer than ``disable_after_hours`` with no success."""
    gone = {job.subscription_id for job, _, outcome in decided
            if outcome.kind == GONE and job.delivery_id in written}
    failing = {job.subscription_id for job, _, outcome in decided
               if outcome.kind in (RETRY, FAILED)} - {
        job.subscription_id for job, _, outcome in decided if outcome.kind == DELIVERED}
    for subscription_id in gone:
        disable(subscription_id, GONE, "the receiver answered 410 Gone on "
                f"{clock.local_now():%Y-%m-%d %H:%M:%S} UTC")
    for subscription_id in failing - gone:
        _disable_if_failing_too_long(subscription_id, settings)


FAILING = "failing"
"""Why a subscription was disabled (the metric's ``reason`` label): GONE or FAILING."""


def _disable_if_failing_too_long(subscription_id, settings):
    """Disable the subscription if it has had no success for
    ``settings.disable_after_hours`` (counted from its last success, or
    from when it was made or enabled again if later); True if it did."""
    hours = settings.disable_after_hours
    cutoff = clock.before(hours * 3600)
    reason = (f"no successful delivery for {hours:g} h while deliveries kept "
              f"failing (disabled {clock.local_now():%Y-%m-%d %H:%M:%S} UTC)")
    with database.atomic():
        stopped = (Subscription.update(is_active=False, disabled_reason=reason,
                                       disabled_at=clock.now())
                   .where(Subscription.id == subscription_id,
                          Subscription.is_active == True,  # noqa: E712
                          fn.COALESCE(Subscription.enabled_at, Subscription.created_at)
                          < cutoff,
                          Subscription.last_success_at.is_null()
                          | (Subscription.last_success_at < cutoff))
                   .execute())
        if stopped:
            disable(subscription_id, FAILING, reason)
    return bool(stopped)


def enable(subscription_id):
    """Send to a disabled subscription again; its clock of failure starts
    anew, and its circuit breaker closes (the operator or user says the
    receiver is back: creates attempt it at once again)."""
    with database.atomic():
        (Subscription.update(is_active=True, disabled_reason=None, disabled_at=None,
                             enabled_at=clock.now(), failure_streak=0,
                             breaker_opened_at=None, breaker_probe_at=None)
         .where(Subscription.id == subscription_id).execute())


def disable(subscription_id, kind, reason):
    """Stop sending to a subscription and fail its waiting deliveries; log
    and count it (``kind``: GONE or FAILING)."""
    with database.atomic():
        (Subscription.update(is_active=False, disabled_reason=reason, disabled_at=clock.now())
         .where(Subscription.id == subscription_id).execute())
        (Delivery.update(status=Delivery.FAILED, locked_until=None,
                         last_error=f"subscription disabled: {reason}")
         .where(Delivery.subscription == subscription_id, Delivery.status == Delivery.PENDING)
         .execute())
    metrics.count_disabled(kind)
    log.warning("webhook subscription %s disabled: %s", subscription_id, reason)


def give_back(jobs):
    """Give leased jobs that were not attempted back to the workers at once
    (each only under the lease it holds)."""
    if not jobs:
        return
    with database.connection_context():
        if is_sqlite():
            with database.atomic():
                for job in jobs:
                    (Delivery.update(locked_until=None)
                     .where(Delivery.id == job.delivery_id, Delivery.lease == job.lease)
                     .execute())
        else:
            database.execute_sql(
                "UPDATE delivery d SET locked_until = NULL FROM unnest(%s::int[], %s::int[]) "
                "AS g(id, lease) WHERE d.id = g.id AND d.lease = g.lease",
                ([job.delivery_id for job in jobs], [job.lease for job in jobs]))


# --- recovery and retention ---------------------------------------------------

def recover(subscription_id, since):
    """Queue again every failed delivery of the subscription created at or
    after ``since`` (naive UTC), with its webhook-id; returns how many."""
    with database.atomic():
        return (Delivery.update(status=Delivery.PENDING, attempts=0,
                                next_attempt_at=clock.now(), locked_until=None)
                .where(Delivery.subscription == subscription_id,
                       Delivery.status == Delivery.FAILED, Delivery.created_at >= since)
                .execute())


def purge_batch(older_than_days):
    """Delete up to ``PURGE_BATCH`` finished deliveries created more than
    ``older_than_days`` ago, with their attempts; returns how many."""
    finished = (Delivery.status.in_([Delivery.DELIVERED, Delivery.FAILED])
                & (Delivery.created_at < clock.before(older_than_days * 86400)))
    with database.atomic():
        ids = [row[0] for row in Delivery.select(Delivery.id).where(finished)
               .order_by(Delivery.id).limit(PURGE_BATCH).tuples()]
        if not ids:
            return 0
        Attempt.delete().where(Attempt.delivery.in_(ids)).execute()
        return Delivery.delete().where(Delivery.id.in_(ids), finished).execute()


def purge(older_than_days, deadline_seconds=None):
    """Purge batch after batch until none is left (or ``deadline_seconds``
    passed); returns how many deliveries were deleted."""
    started = time.monotonic()
    total = 0
    while True:
        deleted = purge_batch(older_than_days)
        total += deleted
        if deleted < PURGE_BATCH:
            return total
        if deadline_seconds is not None and time.monotonic() - started > deadline_seconds:
            return total
