"""The delivery queue: every change of a delivery's state, through one door.

A delivery is one event for one subscription. It is *pending* until a 2xx
(*delivered*), until its last retry fails or its subscription is disabled
(*failed*). Its life: enqueued with the plant that caused it
(``store_new_plant``) or as a test event; claimed by a worker (``claim``)
or taken for a re-send (``take_for_resend``); completed, retried or failed
(``record``); given back unsent (``give_back``); failed with its
subscription (``disable``); queued again (``recover``); purged after its
retention, or failed when stored for a subscription being disabled
(``retention``, the housekeeping's side of the door).

What each change means is decided by ``rules`` (pure); the store of the
bound database (``store.current()``: PostgreSQL or SQLite) applies it.

A sender holds a delivery through a **lease**: ``locked_until``, computed
by the database's clock, and ``lease``, a token every claim bumps, and so
does every other change of a delivery someone may be sending (a re-send,
disabling, recovering): an outcome or a give-back is written only under
the token its sender holds, so a sender whose lease ran out (or whose
delivery was changed meanwhile) writes nothing. An attempt starts only
while its lease has the attempt's deadline plus ``LEASE_MARGIN_SECONDS``
left, counted from before the claim was sent on this process's monotonic
clock (``Job.lease_left``).
"""
import contextlib
import logging
import time

from ...db import clock, database
from ...db.models import Delivery
from ...observability import metrics
from . import backlog, rules, store
from .job import LEASE_MARGIN_SECONDS, Job  # noqa: F401 (part of the queue's face)
from .receiver_text import storable
from .refusals import disabled_refusal, enable_command
from .rules import DELIVERED, FAILED, FAILING, GONE, RETRY

log = logging.getLogger(__name__)

LOG_LEVELS = {DELIVERED: logging.DEBUG, RETRY: logging.INFO,
              FAILED: logging.WARNING, GONE: logging.WARNING}

TEST_EVENT = "plant.test"
TEST_PAYLOAD = '{"id": 0, "name": "Example plant (a test event from plantstore)", "tag": "test"}'
"""The example New Plant body of a test event (a plant that does not exist)."""


def store_new_plant(plant, event_type, payload, settings, traceparent=None, token=None,
                    key_claim=None):
    """Store ``plant`` with one pending delivery per active subscription that
    hears about it, together (the store's ``store_new_plant``); the jobs the
    calling process attempts once committed."""
    leased_at = time.monotonic()
    rows = store.current().store_new_plant(plant, event_type, payload, traceparent,
                                           settings.lease_seconds, token, key_claim)
    return jobs_to_send(rows, leased_at, settings)


def jobs_to_send(rows, leased_at, settings):
    """The jobs of a create's job rows that its process attempts: those
    whose receiver's breaker is closed (the others wait for the workers)."""
    jobs = [Job.from_row(row, leased_at, settings.lease_seconds) for row in rows]
    to_send = [job for job in jobs if not job.breaker_open]
    left = [job for job in jobs if job.breaker_open]
    for _ in left:
        metrics.count_left_to_worker("breaker open")
        backlog.note_left_to_workers()
    if left and store.current().LEASES_AND_JOBS_MAY_DISAGREE:
        # PostgreSQL's create leases a delivery by one snapshot of its
        # receiver's breaker and reads its job by the next (each statement
        # of its function has its own): a breaker that opened in between
        # leaves a lease nobody uses, until it runs out. Given back once
        # the create commits (a delivery not leased is left as it is).
        database.after_commit(lambda: give_back(left))
    return to_send


def enqueue_test_event(subscription_id):
    """Queue a signed example New Plant event for the subscription, due now
    (the workers send it like any other); returns the delivery."""
    delivery_id = store.current().insert_delivery(subscription_id, TEST_EVENT, TEST_PAYLOAD,
                                                  lease_seconds=None)
    return Delivery.get_by_id(delivery_id)


# --- claim -------------------------------------------------------------------

def claim(limit, settings, subscription_room, owner_room, rooms=None, owner_rooms=None,
          due_by=None):
    """Lease up to ``limit`` deliveries due by ``due_by`` (a time read from
    the database; default: now) to this process, fairly; their jobs.

    At most ``rooms.get(subscription id, subscription_room)`` per subscription
    (0: none) and ``owner_rooms.get(owner key, owner_room)`` per owner, the
    owners taking turns (``rules.fair_shares``); a subscription whose
    breaker is open gets one, its probe, when the probe is due (and only
    one claim gets it).
    """
    rooms, owner_rooms = rooms or {}, owner_rooms or {}
    leased_at = time.monotonic()
    backend = store.current()
    with backend.claim_transaction():
        candidates = backend.due_candidates(max([subscription_room, *rooms.values()]), due_by)
        shares = rules.fair_shares(
            [(c["subscription_id"], c["owner_key"], c["breaker_open"]) for c in candidates],
            limit, subscription_room, owner_room, rooms, owner_rooms)
        probes = {c["subscription_id"] for c in candidates if c["breaker_open"]}
        rows = backend.lease(dict(shares), probes, due_by, settings)
    return [Job.from_row(row, leased_at, settings.lease_seconds) for row in rows]


class ResendRefused(Exception):
    """A delivery cannot be re-sent now; the message says why."""


def take_for_resend(delivery_id, settings):
    """Lease one failed (or waiting) delivery for an immediate re-send; its job.

    It starts over on the retry schedule: if this attempt fails, the retries
    follow as for a new event, under the same webhook-id.
    """
    leased_at = time.monotonic()
    delivery = Delivery.get_or_none(Delivery.id == delivery_id)
    if delivery is None:
        raise ResendRefused(f"no delivery with id {delivery_id}")
    if delivery.status == Delivery.DELIVERED:
        raise ResendRefused(f"delivery {delivery_id} was already delivered "
                            f"on {delivery.delivered_at:%Y-%m-%d %H:%M:%S} UTC")
    subscription = delivery.subscription
    if not subscription.is_active:
        raise ResendRefused(disabled_refusal(subscription, enable_command(subscription.id)))
    backend = store.current()
    if not backend.take_for_resend(delivery_id, settings.lease_seconds):
        raise ResendRefused(f"delivery {delivery_id} is being sent right now; "
                            "try again in a moment")
    return Job.from_row(backend.jobs_of([delivery_id])[0], leased_at, settings.lease_seconds)


# --- outcomes ----------------------------------------------------------------

def _outcome_row(job, result, outcome):
    """What the store writes of one attempt: every receiver text storable."""
    error = storable(result.error)
    return store.OutcomeRow(
        delivery_id=job.delivery_id, lease=job.lease, status=outcome.status,
        last_error=None if result.ok else storable(result.summary()), error=error,
        response_body=storable(result.response_body), retry_in=outcome.retry_in,
        started_at=result.started_at, status_code=result.status_code,
        duration_ms=result.duration_ms)


def record(attempts, settings):
    """Decide what each ``(job, result)`` means and write them all at once;
    the outcome kinds, in order (None where the lease was lost meanwhile:
    the delivery was claimed by another sender, changed, or deleted with
    its subscription)."""
    decided = [(job, result, rules.decide(job.attempts + 1, result, settings))
               for job, result in attempts]
    changes = rules.batch_changes((job.subscription_id, result) for job, result, _ in decided)
    backend = store.current()
    # All delivered: one statement (no move depends on a row's state). A
    # failure reads its breakers under lock and may disable its
    # subscription, in the same transaction. Where writers lock rows, every
    # subscription the batch moves is locked first, in id order, before any
    # delivery row (the one lock order): by the failure's read, else by the
    # write's own statement.
    failed = any(outcome.kind != DELIVERED for _, _, outcome in decided)
    wanted = {subscription_id for subscription_id, (closed, failures, _) in changes.items()
              if rules.needs_state(closed, failures)}
    with database.connection_context(), (
            database.atomic() if failed else contextlib.nullcontext()):
        read = backend.breaker_states(
            set(changes) if failed and backend.LOCKS_ROWS else wanted)
        states = {subscription_id: state for subscription_id, state in read.items()
                  if subscription_id in wanted}
        moves = rules.breaker_moves(changes, states, settings.breaker_threshold)
        written = backend.write_outcomes(
            [_outcome_row(*entry) for entry in decided], moves, settings)
        _disable_failing(decided, written, settings)
        missing = [job.delivery_id for job, _, _ in decided if job.delivery_id not in written]
        still_there = backend.still_there(missing) if missing else set()
    kinds = []
    for job, result, outcome in decided:
        if job.delivery_id not in written:
            kinds.append(None)
            why = ("its lease ran out and another sender claimed it, or it was changed "
                   "meanwhile (disabled, recovered or re-sent)"
                   if job.delivery_id in still_there
                   else "it was deleted with its subscription")
            log.warning("delivery %s (%s): outcome (%s) not written: %s", job.delivery_id,
                        job.message_id, storable(result.summary()) or "delivered", why)
            continue
        kinds.append(outcome.kind)
        metrics.count_delivery(outcome.kind)
        log.log(LOG_LEVELS[outcome.kind], "delivery %s (%s) to subscription %s: %s%s",
                job.delivery_id, job.message_id, job.subscription_id, outcome.kind,
                "" if result.ok else f" ({storable(result.summary())})")
    return kinds


def fail_unwritable(job, error, settings):
    """Fail a delivery whose outcome cannot be written (the database refused
    it even alone), so that it is not re-sent forever; whether it was."""
    text = storable(f"the attempt's outcome could not be stored: {error}")
    row = store.OutcomeRow(
        delivery_id=job.delivery_id, lease=job.lease, status=Delivery.FAILED,
        last_error=text, error=text, response_body=None, retry_in=None,
        started_at=clock.local_now(), status_code=None, duration_ms=0)
    with database.connection_context():
        written = store.current().write_outcomes([row], {}, settings)
    if written:
        metrics.count_delivery(FAILED)
        log.warning("delivery %s (%s): failed: %s", job.delivery_id, job.message_id, text)
    return bool(written)


def _disable_failing(decided, written, settings):
    """Disable the subscriptions that answered 410, and those failing for
    longer than ``disable_after_hours`` with no success."""
    gone, failing = rules.to_disable(
        [(job.subscription_id, outcome.kind) for job, _, outcome in decided
         if job.delivery_id in written])
    for subscription_id in gone:
        disable(subscription_id, GONE, "the receiver answered 410 Gone on "
                f"{clock.local_now():%Y-%m-%d %H:%M:%S} UTC")
    hours = settings.disable_after_hours
    for subscription_id in failing:
        reason = (f"no successful delivery for {hours:g} h while deliveries kept "
                  f"failing (disabled {clock.local_now():%Y-%m-%d %H:%M:%S} UTC)")
        if store.current().stop_subscription(subscription_id, reason,
                                             rules.failing_cutoff_seconds(settings)):
            _disabled(subscription_id, FAILING, reason)


def enable(subscription_id):
    """Send to a disabled subscription again; its clock of failure starts
    anew, and its circuit breaker closes (the operator or user says the
    receiver is back: creates attempt it at once again). Its failed
    deliveries stay failed (``recover`` queues them again)."""
    store.current().enable(subscription_id)


def disable(subscription_id, kind, reason):
    """Stop sending to a subscription and fail its waiting deliveries under
    a new lease (an attempt in flight writes nothing); log and count it
    (``kind``: GONE or FAILING)."""
    store.current().stop_subscription(subscription_id, reason)
    _disabled(subscription_id, kind, reason)


def disable_by_owner(subscription_id, reason):
    """Stop sending to a subscription its owner turned off, failing its
    waiting deliveries as ``disable`` does (not counted as plantstore's)."""
    store.current().stop_subscription(subscription_id, reason)
    log.info("webhook subscription %s disabled: %s", subscription_id, reason)


def _disabled(subscription_id, kind, reason):
    metrics.count_disabled(kind)
    log.warning("webhook subscription %s disabled: %s", subscription_id, reason)


def sending_settings(subscription_ids):
    """{id: row} of those of these subscriptions that exist, as they are now:
    what an attempt is sent with, and whether it may be (see the store)."""
    with database.connection_context():  # a sender thread's: back to the pool after
        return store.current().sending_settings(subscription_ids)


def give_back(jobs):
    """Give leased jobs that were not attempted back to the workers at once
    (each only under the lease it holds)."""
    if not jobs:
        return
    with database.connection_context():
        store.current().give_back([(job.delivery_id, job.lease) for job in jobs])


# --- recovery and deletion ----------------------------------------------------

def recover(subscription_id, since):
    """Queue again every failed delivery of the subscription created at or
    after ``since`` (naive UTC), with its webhook-id, under a new lease;
    returns how many."""
    with database.atomic():
        return store.current().recover(subscription_id, since)


def delete_subscription(subscription_id):
    """Delete a subscription with its deliveries and their attempts (its row
    locked first: the one lock order); whether it was there."""
    with database.atomic():
        return store.current().delete_subscription(subscription_id)
