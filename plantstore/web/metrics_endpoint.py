"""``/metrics``: the Prometheus scrape endpoint (no token), and the middleware
that counts and times every request (``observability.metrics`` defines the
metrics themselves).

Under gunicorn every worker writes its counts into ``PROMETHEUS_MULTIPROC_DIR``
(set up by ``config/gunicorn.conf.py``) and a scrape adds them all up, so the
totals are right whichever worker answers. Without that variable (a single
process, tests) the counts live in the process. Gauges read from the
database at scrape time are global already: each scrape reads them once.
"""
import os
import time

from flask import Blueprint, current_app, has_request_context, request
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from ..observability.metrics import count_request

UNMATCHED_ROUTE = "<unmatched>"
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

SCRAPE_COLLECTORS_KEY = "plantstore.web.metrics_endpoint.scrape_collectors"

blp = Blueprint("metrics", __name__)


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
            count_request(rule.rule if rule is not None else UNMATCHED_ROUTE,
                          method if method in KNOWN_METHODS else "OTHER",
                          status[:3], time.perf_counter() - started)
            return start_response(status, headers, exc_info)
        return self.wsgi_app(environ, start_and_count)


def init_metrics(app):
    """Time and count every request of ``app``, and serve ``/metrics``."""
    app.wsgi_app = MetricsMiddleware(app.wsgi_app)
    app.register_blueprint(blp)
