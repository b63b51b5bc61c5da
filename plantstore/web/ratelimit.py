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
"""
import logging
import threading
import time

import apispec
import limits
from flask import g, request
from limits.errors import StorageError
from limits.storage import storage_from_string
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.retry import Retry

from ..db import DATABASE_FAILURES
from ..observability.metrics import count_rate_limit_storage_failure
from .auth import authenticated_caller
from .errors import error_response

log = logging.getLogger(__name__)

UNLIMITED_BLUEPRINTS = ("health", "metrics", "api-docs", "swagger_ui")
"""The probes, ``/metrics``, the OpenAPI document and the docs page."""

KEY_PREFIX, SCOPE = "plantstore", "global"
"""Around the caller in a limit's key, as Flask-Limiter names an application limit."""

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


def redis_options(timeout):
    """The redis-py client options of a Redis storage (``limits`` passes them
    to ``redis.from_url``): every connect and every answer given up after
    ``timeout`` seconds and not tried again, so a hung Redis costs a request
    one timeout; a dropped connection (a restarted Redis) is tried once more
    on a new one, so a restart costs nothing."""
    return {"socket_connect_timeout": timeout, "socket_timeout": timeout,
            "retry": Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,))}


class FailOpen:
    """Whether a process asks the limit storage: not for ``seconds`` after it
    failed, then by one request at a time until it answers again."""

    def __init__(self, seconds):
        self.seconds = seconds
        self.resume_at = 0.0  # time.monotonic() when the storage may be asked; 0: now
        self.lock = threading.Lock()

    def skips_storage(self):
        """True while requests are served unlimited without asking the storage.

        The first request after the period asks it; until that one's answer,
        the others go on unlimited rather than wait for it too.
        """
        if not self.resume_at:
            return False
        with self.lock:
            now = time.monotonic()
            if now < self.resume_at:
                return True
            self.resume_at = now + self.seconds
            return False

    def storage_failed(self, cause):
        """Stop asking the storage for the period, and say so once."""
        with self.lock:
            self.resume_at = time.monotonic() + self.seconds
        log.warning("rate limit storage unreachable: requests served unlimited for "
                    "%gs without asking it: %s: %s", self.seconds, type(cause).__name__,
                    cause)

    def storage_answered(self):
        """Ask the storage again on every request, and say so if it had failed."""
        if self.resume_at:
            with self.lock:
                self.resume_at = 0.0
            log.info("rate limit storage answers again: limits apply")


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
            options = redis_options(app.config["RATE_LIMIT_REDIS_TIMEOUT"])
        self.storage = storage_from_string(uri, wrap_exceptions=True, **options)
        self.fail_open = FailOpen(app.config["RATE_LIMIT_FAIL_OPEN_SECONDS"])
        # None: no route matched (404, 405), which is not limited either; nor
        # is a static file (the portal's stylesheet, loaded with every page).
        self.unlimited = frozenset([None, *(
            rule.endpoint for rule in app.url_map.iter_rules()
            if rule.endpoint.rpartition(".")[2] == "static"
            or rule.endpoint.partition(".")[0] in UNLIMITED_BLUEPRINTS)])
        self.window_ends = {}
        app.before_request(self.spend)
        app.after_request(self.add_headers)

    def spend(self):
        """Count the request against each limit; a 429 once one is spent."""
        if request.endpoint in self.unlimited:
            return None
        if self.fail_open.skips_storage():
            count_rate_limit_storage_failure()
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
            self.fail_open.storage_failed(error.storage_error)
            return None
        self.fail_open.storage_answered()
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
