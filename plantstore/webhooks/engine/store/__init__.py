"""The delivery store: the one interface through which the engine reads and
writes deliveries, with one implementation per backend (as River's drivers
and Oban's engines): ``postgres`` and ``sqlite``. Every implementation
passes ``tests/webhooks/engine/test_store_contract.py``.

A store decides nothing: ``webhooks/engine/rules.py`` decides, ``webhooks/engine/queue.py``
asks the rules and has the store apply what they decided. Its statements
are named queries in ``webhooks/engine/store/<backend>.sql``. Job rows are
rows of the ``plantstore_job`` view (migration 0014), as dicts keyed by
column name (``job.JOB_COLUMNS`` says which ``Job`` reads).
"""
import dataclasses
import datetime
import uuid
from typing import Protocol

from ....db import is_sqlite


class SubscriptionsChanging(Exception):
    """Subscriptions were deleted under every try of a create: nothing was
    stored (a 503 that asks to try again, never a 409)."""


def new_message_id():
    """A delivery's webhook-id, unique to it."""
    return f"msg_{uuid.uuid4().hex}"


@dataclasses.dataclass(frozen=True)
class OutcomeRow:
    """One attempt's outcome as a store writes it (texts already storable)."""
    delivery_id: int
    lease: int
    status: str
    last_error: str | None
    error: str | None
    response_body: str | None
    retry_in: float | None
    started_at: datetime.datetime
    status_code: int | None
    duration_ms: int


class DeliveryStore(Protocol):
    """What a backend's store does (each module implements these functions)."""

    TAKES_TOKEN_AT_INSERT: bool
    """Whether ``insert``ing a create's delivery leased to its web process
    takes its throttled receiver's token (PostgreSQL, by migration 0011's
    trigger: stored unleased with ``lease`` 0 when there was none); if not,
    the web process takes it itself (``throttle.admits``)."""

    LOCKS_ROWS: bool
    """Whether writers take row locks (PostgreSQL): then an outcome batch
    locks every subscription it moves, in id order, before any delivery
    row (by ``breaker_states`` with a failure, else by ``write_outcomes``'s
    own statement), the one lock order of docs/webhooks-isolation.md."""

    CHECKS_CALLER_IN_WRITE: bool
    """Whether ``store_new_plant`` checks the caller's token and claims its
    ``Idempotency-Key`` in its own statement (PostgreSQL's fast path: no
    round trip before the write); if not, the caller checks the token and
    claims the key first, in the transaction the write runs in."""

    LEASES_AND_JOBS_MAY_DISAGREE: bool
    """Whether ``store_new_plant`` may lease a delivery by one snapshot of
    its receiver's breaker and return its job, breaker open, by a later one
    (PostgreSQL: each statement of its function has its own); then the
    create gives such jobs back (``queue.jobs_to_send``)."""

    def claim_transaction(self):
        """A context in which a claim's reads and leases run (SQLite: one
        write transaction; PostgreSQL: none, its lease re-checks each row)."""

    def store_new_plant(self, plant, event_type, payload, traceparent, lease_seconds,
                        token=None, key_claim=None):
        """Enqueueing's one door: store ``plant`` and one pending delivery per
        active subscription that hears about it (the audience rule, written
        once per backend), together; their job rows, leased to the caller
        unless the receiver's breaker is open. ``IntegrityError`` if the
        plant's id is taken. PostgreSQL's fast path does it in one statement
        that also checks ``token`` (``auth.TokenRefused``) and claims
        ``key_claim`` (``idempotency_keys.KeyTaken``); SQLite, in one transaction
        nested in the caller's, which checked the token and claimed the key."""

    def due_candidates(self, most, due_by):
        """The due, unleased deliveries a claim may take, most overdue first:
        dicts of subscription_id, owner_key, breaker_open; at most ``most``
        per subscription (one while its breaker is open)."""

    def lease(self, shares, probes, due_by, settings):
        """Lease ``shares[subscription id]`` due deliveries of each
        subscription (one whose breaker is open, as ``probes`` says was
        read, only if this claim reserves its probe); their job rows."""

    def jobs_of(self, delivery_ids):
        """The job rows of these deliveries."""

    def insert_delivery(self, subscription_id, event_type, payload, lease_seconds,
                        traceparent=None):
        """One pending delivery, due now, leased for ``lease_seconds`` (None:
        not leased); its id."""

    def take_for_resend(self, delivery_id, lease_seconds):
        """Lease one delivery not delivered and not leased, back to the
        start of its retry schedule; whether it was."""

    def breaker_states(self, subscription_ids):
        """{id: rules.BreakerState} of these subscriptions, locked until
        the transaction ends (PostgreSQL)."""

    def write_outcomes(self, outcomes, moves, settings):
        """Write ``outcomes`` (``queue.OutcomeRow``) under their leases and
        the breakers' ``moves`` ({id: rules.BreakerMove}); the ids written."""

    def sending_settings(self, subscription_ids):
        """{id: row} of those of these subscriptions that exist: what an
        attempt is sent with now (url, bearer_token, secret, retired_secrets)
        and whether it may be sent at all (is_active, rate_limit)."""

    def still_there(self, delivery_ids):
        """Those of these deliveries that still exist."""

    def give_back(self, leases):
        """Clear the leases of ``(delivery id, lease)`` pairs still held
        (PostgreSQL: each subscription's row taken first)."""

    def stop_subscription(self, subscription_id, reason, failing_cutoff_seconds=None):
        """Disable a subscription (with a cutoff: only if it has had no
        success within it) and fail its waiting deliveries under a new
        lease; whether it was disabled."""

    def fail_stray_deliveries(self, limit):
        """Fail, as disabling does, the deliveries still pending on up to
        ``limit`` disabled subscriptions (each row locked first, and only if
        still disabled); how many."""

    def enable(self, subscription_id):
        """Enable a subscription again, its breaker closed."""

    def delete_subscription(self, subscription_id):
        """Delete a subscription with its deliveries and their attempts, its
        row locked first; whether it was there."""

    def recover(self, subscription_id, since):
        """Queue again, under a new lease, its failed deliveries created
        since ``since`` (its subscription's row locked first); how many."""

    def purge_batch(self, older_than_days, limit):
        """Delete up to ``limit`` finished deliveries older than that, with
        their attempts; how many."""

    # The throttle (``webhooks/engine/throttle.py``): a token bucket on each
    # throttled subscription's row, refilled and taken by ``rules``' bucket
    # rule on the database's clock, never waiting for a bucket another
    # statement holds (that bucket gives no token, or takes none back).

    def throttle_take_for_claim(self, rooms, default_room, limit, due_by):
        """Take the tokens for a claim: {subscription id: tokens taken} of
        every throttled, active subscription with due, unleased deliveries the
        claim may take, each wanting ``rules.claim_tokens_wanted`` (its
        room: ``rooms.get(id, default_room)``)."""

    def throttle_take(self, wants):
        """Take tokens: {subscription id: tokens wanted} → {id: tokens taken}
        of those that are throttled (the others are absent: no limit)."""

    def throttle_give_back(self, unused):
        """Put back tokens taken but not spent: {subscription id: count > 0}."""


def current():
    """The store of the bound database."""
    from . import postgres, sqlite
    return sqlite if is_sqlite() else postgres
