"""A leased delivery: everything one attempt needs, read while holding the lease.

A job is built by whoever leased the row (the create request that wrote it,
or a worker that claimed it) and carries that lease's expiry. Outcomes are
written only while the row still carries that same expiry, so a sender whose
lease ran out never overwrites the work of the one that took over.
"""
import dataclasses
import datetime

from ..models import Delivery, Subscription
from .secrets import signing_secrets


JOB_COLUMNS = (Delivery.id, Delivery.message_id, Delivery.payload, Delivery.attempts,
               Delivery.subscription, Subscription.id, Subscription.url,
               Subscription.bearer_token, Subscription.secret, Subscription.retired_secrets,
               Subscription.owner, Subscription.breaker_opened_at)
"""What a job is built from (and the breaker state a claim looks at): select
these, not whole rows, where deliveries are leased."""


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
    return Job(
        delivery_id=delivery.id, message_id=delivery.message_id,
        payload=delivery.payload, attempts=delivery.attempts,
        subscription_id=subscription.id, url=subscription.url,
        bearer_token=subscription.bearer_token,
        signing_secrets=signing_secrets(subscription, now),
        leased_until=leased_until, restricted=subscription.owner_id is not None)


def jobs_for_ids(delivery_ids, leased_until, now):
    """The jobs of deliveries just leased to ``leased_until``, oldest first."""
    if not delivery_ids:
        return []
    rows = (Delivery.select(*JOB_COLUMNS).join(Subscription)
            .where(Delivery.id.in_(delivery_ids)).order_by(Delivery.id))
    return [job_for(row, row.subscription, leased_until, now) for row in rows]
