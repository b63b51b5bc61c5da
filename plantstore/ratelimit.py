"""Rate limits per caller (Flask-Limiter), and how the API document shows them.

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
"""
import logging

import apispec
from flask import request
from flask_limiter import ApplicationLimit, Limiter

from .auth import authenticated_caller
from .db import DATABASE_FAILURES
from .metrics import count_rate_limit_storage_failure

log = logging.getLogger(__name__)

UNLIMITED_BLUEPRINTS = ("health", "metrics", "api-docs", "swagger_ui")
"""The probes, ``/metrics``, the OpenAPI document and the docs page."""

REDIS_TIMEOUT_SECONDS = 0.25
"""How long a request waits for Redis before it is served without a limit."""

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


def _breach_message():
    """The ``message`` of a 429."""
    return ("Too many requests: the rate limit of this caller is spent; "
            "retry after the seconds in Retry-After.")


class _StorageFailures(logging.Filter):
    """Counts the limit checks Flask-Limiter could not make (it serves them
    anyway: ``swallow_errors``), and turns its traceback into one line."""

    def filter(self, record):
        if record.exc_info and record.exc_info[1] is not None:
            count_rate_limit_storage_failure()
            error = record.exc_info[1]
            record.msg = "rate limit storage unreachable, request served unlimited: %s: %s"
            record.args = (type(error).__name__, error)
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info = record.exc_text = None
        return True


def init_rate_limits(app):
    """Limit ``app``'s API operations when ``RATE_LIMIT`` is set; call after
    every blueprint is registered. Returns the Limiter, or None when off."""
    limit = app.config["RATE_LIMIT"]
    if not limit:
        return None
    uri = app.config["RATE_LIMIT_STORAGE_URI"]
    options = {}
    if uri.startswith(("redis", "rediss")):
        options = {"socket_connect_timeout": REDIS_TIMEOUT_SECONDS,
                   "socket_timeout": REDIS_TIMEOUT_SECONDS}
    limiter = Limiter(
        caller_key,
        application_limits=[ApplicationLimit(limit_provider=limit,
                                             error_message=_breach_message)],
        storage_uri=uri, storage_options=options, strategy="fixed-window",
        key_prefix="plantstore", headers_enabled=True, swallow_errors=True)
    if not any(isinstance(f, _StorageFailures) for f in limiter.logger.filters):
        limiter.logger.addFilter(_StorageFailures())
    limiter.init_app(app)
    for name in UNLIMITED_BLUEPRINTS:
        limiter.exempt(app.blueprints[name])
    return limiter


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
