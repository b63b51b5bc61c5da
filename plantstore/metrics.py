"""Prometheus metrics, served at ``/metrics`` (no token) in the text format.

- ``plantstore_http_requests_total{route,method,status}``: requests answered,
  by route template (``/plants/<plant_id:id>``, ``<unmatched>`` when no route
  matched), method and status.
- ``plantstore_http_request_duration_seconds{route,method}``: latency histogram.
- ``plantstore_webhook_deliveries_total{outcome}``: webhook delivery attempts
  by the outcome the sender decided (``count_delivery``).
- ``plantstore_webhook_left_to_worker_total{reason}``: deliveries a web
  process did not attempt after the create, leaving them to the workers:
  ``breaker open``, or ``busy`` (its cap on attempts under way was reached).
- ``plantstore_rate_limit_storage_failures_total``: requests served without
  a rate limit because its storage (Redis) could not be reached.
- ``plantstore_outbox_pending_deliveries``: deliveries not yet delivered nor
  given up, counted in the database when scraped.
- ``plantstore_webhook_breaker_open{subscription}`` (1 open, 0 closed) and
  ``plantstore_webhook_failure_streak{subscription}``: each active
  subscription's circuit breaker, read from the database when scraped.

Under gunicorn every worker writes its counts into ``PROMETHEUS_MULTIPROC_DIR``
(set up by ``config/gunicorn.conf.py``) and a scrape adds them all up, so the
totals are right whichever worker answers. Without that variable (a single
process, tests) the counts live in the process.
"""
import logging
import os
import time

from flask import Blueprint, current_app, has_request_context, request
from prometheus_client import (CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry,
                               Counter, Histogram, generate_latest)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

from .models import Delivery, Subscription

log = logging.getLogger(__name__)

UNMATCHED_ROUTE = "<unmatched>"
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

# prometheus_client writes this process's counts into that directory as soon
# as a metric exists; a directory removed meanwhile (a stopped server's)
# must not make every command fail.
if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)

REQUESTS = Counter("plantstore_http_requests",
                   "HTTP requests answered, by route template, method and status.",
                   ["route", "method", "status"])
LATENCY = Histogram("plantstore_http_request_duration_seconds",
                    "Time spent answering HTTP requests, by route template and method.",
                    ["route", "method"])
WEBHOOK_DELIVERIES = Counter("plantstore_webhook_deliveries",
                             "Webhook delivery attempts, by outcome.", ["outcome"])
LEFT_TO_WORKER = Counter("plantstore_webhook_left_to_worker",
                         "Deliveries a web process left to the workers instead of "
                         "attempting them after the create, by reason.", ["reason"])
RATE_LIMIT_STORAGE_FAILURES = Counter(
    "plantstore_rate_limit_storage_failures",
    "Requests served without a rate limit because its storage could not be reached.")
WEBHOOK_DISABLED = Counter("plantstore_webhook_subscriptions_disabled",
                           "Webhook subscriptions disabled by plantstore, by reason "
                           "(gone: the receiver answered 410; failing: no success "
                           "for PLANTSTORE_WEBHOOK_DISABLE_AFTER_HOURS).", ["reason"])

# labels() takes a lock and builds a key on every call; the children are
# looked up here instead, once per label combination and process.
_request_counters = {}
_latency_histograms = {}

blp = Blueprint("metrics", __name__)


def count_delivery(outcome):
    """Count one webhook delivery attempt that ended in ``outcome``."""
    WEBHOOK_DELIVERIES.labels(outcome=outcome).inc()


def count_left_to_worker(reason):
    """Count one delivery a web process left to the workers, and why."""
    LEFT_TO_WORKER.labels(reason=reason).inc()
def count_rate_limit_storage_failure():
    """Count one request served unlimited because the limit storage failed."""
    RATE_LIMIT_STORAGE_FAILURES.inc()
def count_disabled(reason):
    """Count one webhook subscription disabled for ``reason`` (gone, failing)."""
    WEBHOOK_DISABLED.labels(reason=reason).inc()


def _observe(route, method, status, seconds):
    """Count one answered request and record its latency."""
    counter = _request_counters.get((route, method, status))
    if counter is None:
        counter = _request_counters.setdefault(
            (route, method, status), REQUESTS.labels(route, method, status))
    counter.inc()
    histogram = _latency_histograms.get((route, method))
    if histogram is None:
        histogram = _latency_histograms.setdefault(
            (route, method), LATENCY.labels(route, method))
    histogram.observe(seconds)


class OutboxBacklogCollector:
    """The number of pending deliveries and of disabled webhook subscriptions,
    read from the database at scrape time."""

    def collect(self):
        try:
            pending = Delivery.select().where(Delivery.status == Delivery.PENDING).count()
            disabled = Subscription.select().where(
                Subscription.is_active == False).count()  # noqa: E712
        except Exception:  # an unreachable database must not break the scrape
            log.warning("could not count pending webhook deliveries", exc_info=True)
            return
        yield GaugeMetricFamily("plantstore_outbox_pending_deliveries",
                                "Webhook deliveries waiting to be delivered.",
                                value=pending)
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


def exposition():
    """Every metric in the Prometheus text format, summed over processes."""
    scrape_time = CollectorRegistry()
    scrape_time.register(OutboxBacklogCollector())
    scrape_time.register(BreakerCollector())
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        MultiProcessCollector(scrape_time)
        return generate_latest(scrape_time)
    return generate_latest(REGISTRY) + generate_latest(scrape_time)


@blp.get("/metrics")
def metrics():
    """The Prometheus scrape endpoint."""
    return current_app.response_class(exposition(), mimetype=None,
                                      content_type=CONTENT_TYPE_LATEST)


class MetricsMiddleware:
    """WSGI middleware counting and timing every request as it is answered.

    The route template is read when the response starts, while Flask's
    request context is still active; no Flask hook runs per request.
    """

    def __init__(self, wsgi_app):
        self.wsgi_app = wsgi_app

    def __call__(self, environ, start_response):
        started = time.perf_counter()

        def start_and_count(status, headers, exc_info=None):
            rule = request.url_rule if has_request_context() else None
            method = environ.get("REQUEST_METHOD")
            _observe(rule.rule if rule is not None else UNMATCHED_ROUTE,
                     method if method in KNOWN_METHODS else "OTHER",
                     status[:3], time.perf_counter() - started)
            return start_response(status, headers, exc_info)
        return self.wsgi_app(environ, start_and_count)


def init_metrics(app):
    """Time and count every request of ``app``, and serve ``/metrics``."""
    app.wsgi_app = MetricsMiddleware(app.wsgi_app)
    app.register_blueprint(blp)
