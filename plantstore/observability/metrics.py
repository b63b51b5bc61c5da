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
- Gauges read from the database when scraped, registered by the parts that
  own what they measure (``add_scrape_collector``): the webhook backlog and
  circuit breakers (``webhooks/engine/gauges.py``).

Under gunicorn every worker writes its counts into ``PROMETHEUS_MULTIPROC_DIR``
(set up by ``config/gunicorn.conf.py``) and a scrape adds them all up, so the
totals are right whichever worker answers. Without that variable (a single
process, tests) the counts live in the process. Gauges read from the
database at scrape time are global already: each scrape reads them once.
"""
import os
import time

from flask import Blueprint, current_app, has_request_context, request
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.multiprocess import MultiProcessCollector

from . import metrics_dir

UNMATCHED_ROUTE = "<unmatched>"
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

# prometheus_client writes this process's counts into that directory as soon
# as a metric exists; a directory removed meanwhile (a stopped server's)
# must not make every command fail, and one that cannot be made stops the
# process (this import, before any command runs) with one line, exit 2.
metrics_dir.make_or_exit(os.environ)

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
NOT_SENT = Counter("plantstore_webhook_not_sent",
                   "Deliveries a process gave back unsent for trouble of its own (no "
                   "attempt counted), by reason: no key opens a stored secret, the "
                   "lease ran out before the request left, changed configuration, the "
                   "database unavailable to read the subscription, an internal error "
                   "before the first byte.", ["reason"])
RATE_LIMIT_STORAGE_FAILURES = Counter(
    "plantstore_rate_limit_storage_failures",
    "Requests served without a rate limit because its storage could not be reached.")
WEBHOOK_DISABLED = Counter("plantstore_webhook_subscriptions_disabled",
                           "Webhook subscriptions disabled by plantstore, by reason "
                           "(gone: the receiver answered 410; failing: no success "
                           "for PLANTSTORE_WEBHOOK_DISABLE_AFTER_HOURS).", ["reason"])

SCRAPE_COLLECTORS_KEY = "plantstore.observability.metrics.scrape_collectors"

blp = Blueprint("metrics", __name__)


def count_delivery(outcome):
    """Count one webhook delivery attempt that ended in ``outcome``."""
    WEBHOOK_DELIVERIES.labels(outcome=outcome).inc()


def count_left_to_worker(reason):
    """Count one delivery a web process left to the workers, and why."""
    LEFT_TO_WORKER.labels(reason=reason).inc()
def count_not_sent(reason):
    """Count one delivery given back unsent for this process's own ``reason``."""
    NOT_SENT.labels(reason=reason).inc()


def count_rate_limit_storage_failure():
    """Count one request served unlimited because the limit storage failed."""
    RATE_LIMIT_STORAGE_FAILURES.inc()
def count_disabled(reason):
    """Count one webhook subscription disabled for ``reason`` (gone, failing)."""
    WEBHOOK_DISABLED.labels(reason=reason).inc()


def _observe(route, method, status, seconds):
    """Count one answered request and record its latency."""
    REQUESTS.labels(route, method, status).inc()
    LATENCY.labels(route, method).observe(seconds)


def add_scrape_collector(app, collector):
    """Have ``app``'s ``/metrics`` collect ``collector`` (a prometheus_client
    collector) at every scrape: for gauges read when scraped, such as counts
    in the database, which are the same whichever process answers."""
    app.extensions.setdefault(SCRAPE_COLLECTORS_KEY, []).append(collector)


def exposition(app):
    """Every metric of ``app`` in the Prometheus text format, summed over processes."""
    scrape_time = CollectorRegistry()
    for collector in app.extensions.get(SCRAPE_COLLECTORS_KEY, ()):
        scrape_time.register(collector)
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        MultiProcessCollector(scrape_time)
        return generate_latest(scrape_time)
    return generate_latest(REGISTRY) + generate_latest(scrape_time)


@blp.get("/metrics")
def metrics():
    """The Prometheus scrape endpoint."""
    return current_app.response_class(exposition(current_app), mimetype=None,
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
