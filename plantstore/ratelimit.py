"""Rate limits per caller (the ``limits`` library), and how the API document shows them.

``PLANTSTORE_RATE_LIMIT`` (e.g. ``600/minute``; several separated by ``;``)
is one budget per caller across every API operation: the user of a valid
bearer token, or the client address for requests without one. Counts live
in ``PLANTSTORE_RATE_LIMIT_STORAGE_URI``: ``memory://`` counts per process,
``redis://`` shares them between processes and machines.

Over the limit a request gets a 429 in the error shape with ``Retry-After``;
every limited answer carries ``X-RateLimit-Limit``, ``-Remaining`` and
``-Reset``. The probes, ``/metrics``, ``/openapi.json`` and the docs page are
never limited. When the storage cannot be reached the request is served
unlimited (fail open), logged and counted on ``/metrics``; limits apply again
as soon as the storage answers.

Why ``limits`` directly rather than Flask-Limiter (which wraps it): with a
limit never reached, ``GET /plants?limit=10`` took 170 µs in-process without
a limit, 308 µs with Flask-Limiter counting in memory and 513 µs in Redis
(0.44x the throughput under wrk): it resolves, filters and re-parses its
limits on every request and asks Redis three times. Here the limits are
parsed once and a request costs one ``incr`` per limit (one round trip to
Redis; the window's end is asked once per window and process): 187 µs in
memory, 288 µs in Redis. Keys, fixed windows, headers and their values are
Flask-Limiter's.
"""
import logging
import time

import apispec
import limits
from flask import g, request
from limits.errors import StorageError
from limits.storage import storage_from_string

from .auth import authenticated_caller
from .db import DATABASE_FAILURES
from .errors import error_response
from .metrics import count_rate_limit_storage_failure

log = logging.getLogger(__name__)

UNLIMITED_BLUEPRINTS = ("health", "metrics", "api-docs", "swagger_ui")
"""The probes, ``/metrics``, the OpenAPI document and the docs page."""

REDIS_TIMEOUT_SECONDS = 0.25
"""How long a request waits for Redis before it is served without a limit."""

KEY_PREFIX, SCOPE = "plantstore", "global"
"""Around the caller in a limit's key, as Flask-Limiter names an application limit."""

SWEEP_SECONDS = 1.0
"""How often at most ``memory://`` frees expired counts (see _sweep_less_often)."""

REMEMBERED_WINDOWS = 10_000
"""Window ends a process remembers before it forgets them all and asks again."""

BREACH_MESSAGE = ("Too many requests: the rate limit of this caller is spent; "
                  "retry after the seconds in Retry-After.")

HEADERS = {
    "X-RateLimit-Limit": "Requests allowed in the current window of the caller's limit.",
    "X-RateLimit-Remaining": "Requests left in the current window.",
    "X-RateLimit-Reset": "When the current window ends, in seconds since the Unix epoch.",
}
RETRY_AFTER = {"Retry-After": "Seconds to wait before the next request."}


def caller_key():
    """Whose budget a request spends: its token's user, else its client address."""
    try:
        caller = authenticated_caller()
    except DATABASE_FAILURES:
        caller = None  # the view answers 503; meanwhile the address is limited
    if caller is not None:
        return f"user:{caller.user_id}"
    return f"address:{request.remote_addr}"


class RateLimiter:
    """``app``'s limits, parsed once, counted in one storage by fixed windows."""

    def __init__(self, app):
        # Shortest window first, and the first spent one stops the count, as
        # in Flask-Limiter: a refused request does not spend the longer ones.
        # Each limit: (amount, window seconds, key with "{}" for the caller).
        self.limits = [(item.amount, item.get_expiry(), item.key_for(KEY_PREFIX, "{}", SCOPE))
                       for item in sorted(limits.parse_many(app.config["RATE_LIMIT"]))]
        uri = app.config["RATE_LIMIT_STORAGE_URI"]
        options = {}
        if uri.startswith("redis"):
            options = {"socket_connect_timeout": REDIS_TIMEOUT_SECONDS,
                       "socket_timeout": REDIS_TIMEOUT_SECONDS}
        self.storage = storage_from_string(uri, wrap_exceptions=True, **options)
        _sweep_less_often(self.storage)
        # None: no route matched (404, 405), which is not limited either.
        self.unlimited = frozenset([None, *(
            rule.endpoint for rule in app.url_map.iter_rules()
            if rule.endpoint == "static"
            or rule.endpoint.partition(".")[0] in UNLIMITED_BLUEPRINTS)])
        self.window_ends = {}
        app.before_request(self.spend)
        app.after_request(self.add_headers)

    def spend(self):
        """Count the request against each limit; a 429 once one is spent."""
        if request.endpoint in self.unlimited:
            return None
        caller = caller_key()
        shown = None
        try:
            for amount, expiry, key in self.limits:
                key = key.format(caller)
                count = self.storage.incr(key, expiry)
                if shown is None or count > amount:
                    shown = amount, expiry, key, count
                if count > amount:
                    break
            amount, expiry, key, count = shown
            g.rate_limit = amount, count, self.window_end(key, expiry, count)
        except StorageError as error:
            count_rate_limit_storage_failure()
            cause = error.storage_error
            log.warning("rate limit storage unreachable, request served unlimited: %s: %s",
                        type(cause).__name__, cause)
            return None
        if count > amount:
            return error_response(429, BREACH_MESSAGE)
        return None

    def window_end(self, key, expiry, count):
        """When the window of ``key`` ends: known when this request opened it,
        else asked of the storage once per window and process."""
        now = time.time()
        if count == 1:
            end = now + expiry
        else:
            end = self.window_ends.get(key, 0)
            if end > now:
                return end
            end = self.storage.get_expiry(key)
        if len(self.window_ends) >= REMEMBERED_WINDOWS:
            self.window_ends.clear()
        self.window_ends[key] = end
        return end

    @staticmethod
    def add_headers(response):
        """Flask-Limiter's headers on an answer the limit was counted for, and
        on a 429 the seconds until its window ends as ``Retry-After`` (any
        other answer keeps its own: a 503's or an in-flight 409's)."""
        counted = g.pop("rate_limit", None)
        if counted is not None:
            amount, count, end = counted
            reset = int(end + 1)
            headers = response.headers
            headers.add("X-RateLimit-Limit", str(amount))
            headers.add("X-RateLimit-Remaining", str(max(amount - count, 0)))
            headers.add("X-RateLimit-Reset", str(reset))
            if response.status_code == 429:
                headers["Retry-After"] = str(max(int(reset - time.time()), 1))
        return response


def _sweep_less_often(storage):
    """Let ``limits``' memory storage start its sweeping timer thread at most
    every SWEEP_SECONDS rather than after every 10 ms of traffic (that cost
    ~20 µs a request in-process). Counts still expire on time (the storage
    checks expiry when it reads one); only their memory is freed later."""
    schedule = getattr(storage, "_MemoryStorage__schedule_expiry", None)
    if schedule is None:  # not the memory storage
        return
    due = 0.0

    def now_and_then():
        nonlocal due
        now = time.monotonic()
        if now >= due:
            due = now + SWEEP_SECONDS
            schedule()
    storage._MemoryStorage__schedule_expiry = now_and_then


def init_rate_limits(app):
    """Limit ``app``'s API operations when ``RATE_LIMIT`` is set; call after
    every blueprint is registered. Returns the RateLimiter, or None when off."""
    if not app.config["RATE_LIMIT"]:
        return None
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
