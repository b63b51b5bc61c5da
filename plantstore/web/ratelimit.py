"""Rate limits per caller (the ``limits`` library), and how the API document shows them.

``PLANTSTORE_RATE_LIMIT`` (e.g. ``600/minute``; several separated by ``;``)
is one budget per caller across every API operation: the user of a valid
bearer token, or the client address for requests without one. Counts live
in ``PLANTSTORE_RATE_LIMIT_STORAGE_URI``: ``memory://`` counts per process,
``redis://`` shares them between processes and machines.

Over the limit a request gets a 429 in the error shape with ``Retry-After``;
every limited answer carries ``X-RateLimit-Limit``, ``-Remaining`` and
``-Reset``. The probes, ``/metrics``, ``/openapi.json``, the docs page and
static files (the portal's stylesheet) are never limited.

When the storage does not answer within ``PLANTSTORE_RATE_LIMIT_REDIS_TIMEOUT``
(tens of milliseconds), the request is served unlimited (fail open) and, for
``PLANTSTORE_RATE_LIMIT_FAIL_OPEN_SECONDS``, so is every request of the
process without asking the storage: a hung Redis costs one timeout per
period and process, not one per request. The failure is logged once per
period, and every request served so is counted on ``/metrics``. After the
period one request asks the storage again (the others keep being served
meanwhile); when it answers, limits apply again.

Why ``limits`` directly rather than Flask-Limiter (which wraps it): with a
limit never reached, ``GET /plants?limit=10`` took 170 µs in-process without
a limit, 308 µs with Flask-Limiter counting in memory and 513 µs in Redis
(0.44x the throughput under wrk): it resolves, filters and re-parses its
limits on every request and asks Redis three times. Here the limits are
parsed once and a request costs one ``incr`` per limit (one round trip to
Redis; the window's end is asked once per window and process): 187 µs in
memory, 288 µs in Redis. Keys, fixed windows, headers and their values are
Flask-Limiter's.

The counting (``rate_limiter.py``, with ``limits``' storages and redis) is
imported only when a limit is set.
"""
import apispec

UNLIMITED_BLUEPRINTS = ("health", "metrics", "api-docs", "swagger_ui")
"""The probes, ``/metrics``, the OpenAPI document and the docs page."""

HEADERS = {
    "X-RateLimit-Limit": "Requests allowed in the current window of the caller's limit.",
    "X-RateLimit-Remaining": "Requests left in the current window.",
    "X-RateLimit-Reset": "When the current window ends, in seconds since the Unix epoch.",
}
RETRY_AFTER = {"Retry-After": "Seconds to wait before the next request."}


def init_rate_limits(app):
    """Limit ``app``'s API operations when ``RATE_LIMIT`` is set; call after
    every blueprint is registered. Returns the RateLimiter, or None when off."""
    if not app.config["RATE_LIMIT"]:
        return None
    from .rate_limiter import RateLimiter
    return RateLimiter(app)


def _header(description):
    return {"description": description, "schema": {"type": "integer"}}


class RateLimitPlugin(apispec.BasePlugin):
    """Documents the 429 answer and the rate limit headers on every operation
    of the API document (all of them are limited), whether or not a limit is
    configured: a client must be ready for them."""

    def init_spec(self, spec):
        super().init_spec(spec)
        for name, description in {**HEADERS, **RETRY_AFTER}.items():
            spec.components.header(name, _header(description))
        spec.components.response("TooManyRequests", {
            "description": "The caller's rate limit is spent",
            "headers": {name: {"$ref": f"#/components/headers/{name}"}
                        for name in (*RETRY_AFTER, *HEADERS)},
            "content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/Error"}}},
        })

    def operation_helper(self, path=None, operations=None, **kwargs):
        for operation in (operations or {}).values():
            responses = operation.setdefault("responses", {})
            for response in responses.values():
                # A response given by reference ($ref) takes no siblings.
                if isinstance(response, dict) and "$ref" not in response:
                    headers = response.setdefault("headers", {})
                    for name in HEADERS:
                        headers[name] = {"$ref": f"#/components/headers/{name}"}
            responses[429] = {"$ref": "#/components/responses/TooManyRequests"}
