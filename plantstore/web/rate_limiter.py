"""The counting of ``ratelimit.py``'s limits: each request spends its
caller's budget in the storage, with the fail-open period when the storage
does not answer. Imported only when ``PLANTSTORE_RATE_LIMIT`` is set."""
import logging
import threading
import time

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
from .ratelimit import UNLIMITED_BLUEPRINTS

log = logging.getLogger(__name__)

KEY_PREFIX, SCOPE = "plantstore", "global"
"""Around the caller in a limit's key, as Flask-Limiter names an application limit."""

REMEMBERED_WINDOWS = 10_000
"""Window ends a process remembers before it forgets them all and asks again."""

BREACH_MESSAGE = ("Too many requests: the rate limit of this caller is spent; "
                  "retry after the seconds in Retry-After.")

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
