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

A database that cannot be read leaves its gauges out of the scrape; the
rest of ``/metrics`` still answers. The log says so in one line when that
starts and in one when the gauges can be read again (``ScrapeTrouble``), as
the webhook worker does, not at every scrape.
"""
import logging
import threading

from prometheus_client.core import GaugeMetricFamily

from ...db import is_unavailable
from ...db.models import Subscription
from .backlog import oldest_due_age, sendable

log = logging.getLogger(__name__)


class ScrapeTrouble:
    """What this process's scrapes say of the database: one line when the
    gauges cannot be read for its being unavailable, one when they can
    again; any other failure (a bug) with its traceback, each time."""

    def __init__(self):
        self.lock = threading.Lock()
        self.unavailable = False

    def failed(self, what, error):
        """Reading ``what`` failed with ``error``."""
        if not is_unavailable(error):
            log.error("could not read %s for /metrics", what, exc_info=error)
            return
        with self.lock:
            started, self.unavailable = not self.unavailable, True
        if started:
            detail = (str(error).strip().splitlines() or [type(error).__name__])[0]
            log.warning("the webhook gauges are left out of /metrics: the database cannot "
                        "serve (%s)", detail)

    def read(self):
        """A scrape read the gauges."""
        with self.lock:
            ended, self.unavailable = self.unavailable, False
        if ended:
            log.info("the webhook gauges are on /metrics again: the database serves")


class OutboxBacklogCollector:
    """The pending deliveries, the oldest due one's age and the disabled
    subscriptions, read from the database at scrape time."""

    def __init__(self, trouble):
        self.trouble = trouble

    def collect(self):
        try:
            pending = sendable().count()
            oldest_due = oldest_due_age()
            disabled = Subscription.select().where(
                Subscription.is_active == False).count()  # noqa: E712
        except Exception as error:  # the rest of the scrape answers
            self.trouble.failed("the webhook backlog", error)
            return
        self.trouble.read()
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

    def __init__(self, trouble):
        self.trouble = trouble

    def collect(self):
        try:
            rows = list(Subscription.select(
                Subscription.id, Subscription.failure_streak, Subscription.breaker_opened_at)
                .where(Subscription.is_active == True).tuples())  # noqa: E712
        except Exception as error:  # the rest of the scrape answers
            self.trouble.failed("the webhook circuit breakers", error)
            return
        self.trouble.read()
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
    scrape (``create_app`` registers them: the engine knows no Flask app);
    they share one ``ScrapeTrouble``, so an outage is said once."""
    trouble = ScrapeTrouble()
    return [OutboxBacklogCollector(trouble), BreakerCollector(trouble)]
