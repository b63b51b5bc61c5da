"""A leased delivery, as a sender holds it (see ``queue``)."""
import dataclasses
import time

LEASE_MARGIN_SECONDS = 1.0
"""How much longer than its attempt's deadline a lease must still last for
the attempt to start: its outcome is written inside the lease."""


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
    event_type: str  # what it announces: plant.created, plant.test (migration 0015)
    # The lease's timing, by this process's clock (not a column):
    leased_at: float  # time.monotonic() before the lease was taken
    lease_seconds: float

    @classmethod
    def from_row(cls, row, leased_at, lease_seconds):
        """The job of a store's job row (a ``plantstore_job`` row, as a dict:
        every field but the lease's timing is read from it by name)."""
        return cls(**{name: row[name] for name in JOB_COLUMNS},
                   leased_at=leased_at, lease_seconds=lease_seconds)


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

    def latest_start(self, send_bound):
        """The ``time.monotonic()`` after which an attempt would not end, with
        its outcome, inside the lease: no request is written after it."""
        return self.leased_at + self.lease_seconds - send_bound - LEASE_MARGIN_SECONDS

    def may_start(self, send_bound):
        """Whether an attempt started now ends, with its outcome, inside the lease."""
        return time.monotonic() < self.latest_start(send_bound)


JOB_COLUMNS = tuple(field.name for field in dataclasses.fields(Job)
                    if field.name not in ("leased_at", "lease_seconds"))
"""What ``Job`` reads of a job row: the columns of the ``plantstore_job`` view
(migration 0014) it knows."""
