"""The webhook gauges on ``/metrics``, read from the database at each scrape
(so every gunicorn worker answers the same):

- ``plantstore_outbox_pending_deliveries``: deliveries not yet delivered
  nor given up, of active subscriptions (what a worker could send);
- ``plantstore_outbox_oldest_due_age_seconds``: how long the oldest due
  delivery has waited for a sender (0 when none is due; ``backlog.py``);
- ``plantstore_webhook_subscriptions_inactive``: subscriptions disabled now;
- ``plantstore_webhook_breaker_open{subscription}`` (1 open, 0 closed) and
  ``plantstore_webhook_failure_streak{subscription}``: each active
  subscription's circuit breaker.

A database that cannot be read leaves its gauges out of the scrape (and
says so in the log); the rest of ``/metrics`` still answers.
"""
import logging

from prometheus_client.core import GaugeMetricFamily

from ...db.models import Subscription
from .backlog import oldest_due_age, sendable

log = logging.getLogger(__name__)


class OutboxBacklogCollector:
    """The pending deliveries, the oldest due one's age and the disabled
    subscriptions, read from the database at scrape time."""

    def collect(self):
        try:
            pending = sendable().count()
            oldest_due = oldest_due_age()
            disabled = Subscription.select().where(
                Subscription.is_active == False).count()  # noqa: E712
        except Exception:  # an unreachable database must not break the scrape
            log.warning("could not count pending webhook deliveries", exc_info=True)
            return
        yield GaugeMetricFamily("plantstore_outbox_pending_deliveries",
                                "Webhook deliveries waiting to be delivered.",
                                value=pending)
        yield GaugeMetricFamily("plantstore_outbox_oldest_due_age_seconds",
                                "Seconds the oldest due webhook delivery (pending, due, "
                                "held by no sender) has waited, by the database's clock; "
                                "0 when none is due.", value=oldest_due)
        yield GaugeMetricFamily("plantstore_webhook_subscriptions_inactive",
                                "Webhook subscriptions disabled now (by a 410 or by "
                                "sustained failure).", value=disabled)


class BreakerCollector:
    """Each active subscription's circuit breaker, read from the database at scrape time."""

    def collect(self):
        try:
            rows = list(Subscription.select(
                Subscription.id, Subscription.failure_streak, Subscription.breaker_opened_at)
                .where(Subscription.is_active == True).tuples())  # noqa: E712
        except Exception:  # an unreachable database must not break the scrape
            log.warning("could not read the webhook circuit breakers", exc_info=True)
            return
        is_open = GaugeMetricFamily(
            "plantstore_webhook_breaker_open",
            "1 while the subscription's circuit breaker is open, else 0.",
            labels=["subscription"])
        streak = GaugeMetricFamily(
            "plantstore_webhook_failure_streak",
            "Failed webhook attempts in a row, by subscription.", labels=["subscription"])
        for subscription_id, failures, opened_at in rows:
            is_open.add_metric([str(subscription_id)], 0 if opened_at is None else 1)
            streak.add_metric([str(subscription_id)], failures)
        yield is_open
        yield streak


def collectors():
    """The webhook gauges' collectors, which ``/metrics`` reads at each
    scrape (``create_app`` registers them: the engine knows no Flask app)."""
    return [OutboxBacklogCollector(), BreakerCollector()]
