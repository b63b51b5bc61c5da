"""A leased delivery: everything one attempt needs, read while holding the lease.

A job is built by whoever leased the row (the create request that wrote it,
or a worker that claimed it) and carries that lease's expiry. Outcomes are
written only while the row still carries that same expiry, so a sender whose
lease ran out never overwrites the work of the one that took over.
"""
import dataclasses
import datetime
import typing

from ..models import Delivery, Subscription
from .secrets import signing_secrets


JOB_COLUMNS = (Delivery.id, Delivery.message_id, Delivery.payload, Delivery.attempts,
               Subscription.id, Subscription.url, Subscription.bearer_token,
               Subscription.secret, Subscription.retired_secrets, Subscription.owner,
               Subscription.breaker_opened_at)
"""What a job is built from (and the breaker state a claim looks at): select
these, not whole rows, where deliveries are leased (see ``JobRow``)."""


class JobRow(typing.NamedTuple):
    """A row of ``JOB_COLUMNS`` as the database driver reads it (it has a
    subscription's ``secret`` and ``retired_secrets``, as ``signing_secrets``
    needs)."""
    delivery_id: int
    message_id: str
    payload: str
    attempts: int
    subscription_id: int
    url: str
    bearer_token: str | None
    secret: str
    retired_secrets: str | None
    owner_id: int | None
    breaker_opened_at: object  # a datetime, or its text on SQLite; None when closed

    @property
    def breaker_is_open(self):
        """Whether the receiver's breaker was open when the row was read."""
        return self.breaker_opened_at is not None


@dataclasses.dataclass(frozen=True)
class Job:
    """One attempt to make: the delivery, its receiver and the lease held."""
    delivery_id: int
    message_id: str
    payload: str
    attempts: int
    subscription_id: int
    url: str
    bearer_token: str | None
    signing_secrets: tuple
    leased_until: datetime.datetime
    restricted: bool = False  # an API subscription: sent only to permitted addresses


def job_for(delivery, subscription, leased_until, now):
    """The job of ``delivery`` to ``subscription`` under a lease to ``leased_until``."""
    return job_from_row(JobRow(
        delivery.id, delivery.message_id, delivery.payload, delivery.attempts,
        subscription.id, subscription.url, subscription.bearer_token, subscription.secret,
        subscription.retired_secrets, subscription.owner_id, subscription.breaker_opened_at),
        leased_until, now)


def job_from_row(row, leased_until, now):
    """The job of a ``JobRow`` whose delivery is leased to ``leased_until``."""
    return Job(
        delivery_id=row.delivery_id, message_id=row.message_id, payload=row.payload,
        attempts=row.attempts, subscription_id=row.subscription_id, url=row.url,
        bearer_token=row.bearer_token,
        signing_secrets=signing_secrets(row, now),
        leased_until=leased_until, restricted=row.owner_id is not None)


def job_of(delivery_id, leased_until, now):
    """The job of a delivery just leased to ``leased_until``."""
    row = (Delivery.select(*JOB_COLUMNS).join(Subscription)
           .where(Delivery.id == delivery_id).tuples().get())
    return job_from_row(JobRow(*row), leased_until, now)
