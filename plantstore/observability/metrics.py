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
  own what they measure (``web.metrics_endpoint.add_scrape_collector``): the
  webhook backlog and circuit breakers (``webhooks/engine/gauges.py``).

The endpoint and the middleware that counts requests are the web's
(``web/metrics_endpoint.py``): a worker counts without importing Flask.
"""
import os

from prometheus_client import Counter, Histogram

from . import metrics_dir

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


def count_request(route, method, status, seconds):
    """Count one answered request and record its latency."""
    REQUESTS.labels(route, method, status).inc()
    LATENCY.labels(route, method).observe(seconds)
