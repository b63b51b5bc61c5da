"""The one error shape: ``{"error": <status>, "message": "..."}`` everywhere.

Every failure of every route, whether raised by a view, by routing (404,
405), by request parsing (400, 413, 415) or by a bug (500), leaves through
``error_response`` so clients see a single JSON shape and never a framework
page, a stack trace or SQL.
"""
import logging

from flask import current_app, json, request
from peewee import DatabaseError, DataError
from werkzeug.exceptions import HTTPException, InternalServerError

from ..db import DATABASE_FAILURES, database, faults, is_unavailable

log = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 5
"""What a 503 asks a client to wait before it tries again."""


def error_response(status, message, details=None, headers=None):
    """A JSON error response in the contract's shape."""
    body = {"error": status, "message": message}
    if details:
        body["details"] = details
    response = current_app.response_class(
        json.dumps(body), status=status, mimetype="application/json")
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response


def _flatten(messages, prefix=""):
    """marshmallow's nested {field: {sub: [msgs]}} → {"field.sub": [msgs]}."""
    flat = {}
    for key, value in messages.items():
        name = "body" if key == "_schema" and not prefix else f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat.setdefault(name, []).extend(str(m) for m in value)
    return flat


def validation_details(error):
    """The field → messages map of a webargs validation error."""
    messages = (getattr(error, "data", None) or {}).get("messages") or {}
    details = {}
    # webargs keys messages by location ("json", "query"): drop that level.
    for location, value in messages.items():
        if isinstance(value, dict):
            details.update(_flatten(value))
        else:
            details.setdefault("body" if location == "json" else location,
                               []).extend(str(m) for m in value)
    return details


def _describe(details):
    field, messages = next(iter(details.items()))
    sentence = messages[0] if field == "body" else f"Invalid {field}: {messages[0]}"
    return sentence if sentence.endswith(".") else sentence + "."


def _framework_message(error):
    """A sentence for the errors routing and parsing raise on their own."""
    if error.code == 404:
        return f"Nothing is served at {request.path}."
    if error.code == 405:
        allowed = ", ".join(sorted(getattr(error, "valid_methods", None) or ()))
        return f"{request.method} is not allowed on {request.path}; allowed: {allowed}."
    if error.code == 413:
        return (f"The request body is larger than the "
                f"{current_app.config['MAX_CONTENT_LENGTH']} bytes allowed.")
    return error.description


def handle_http_exception(error):
    """Turn any werkzeug HTTPException (abort, routing, parsing) into JSON."""
    details = validation_details(error)
    if details:
        return error_response(400, _describe(details), details)
    if error.code >= 500:
        return error_response(error.code, "The server could not complete the request.")
    data = getattr(error, "data", None) or {}
    message = data.get("message") or _framework_message(error)
    # Keep the headers the exception carries (Allow on 405,
    # WWW-Authenticate on 401), but not its HTML content type.
    headers = {name: value for name, value in error.get_headers()
               if name.lower() != "content-type"}
    headers.update(data.get("headers") or {})
    return error_response(error.code, message, headers=headers)


def database_unavailable_response(message="The database is unavailable; try again shortly."):
    """The 503 a request gets while the database cannot serve it."""
    return error_response(503, message, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})


def handle_database_failure(error):
    """A 503 while the database is unavailable (logged in one line); else a bug."""
    if not is_unavailable(error):
        return handle_unexpected_exception(error)
    reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
    log.warning("database unavailable: %s", reason)
    # The pool's idle connections most likely died with this one (a server
    # restart): drop them, so each does not fail a request of its own later.
    database.close_idle()
    return database_unavailable_response()


SEQUENCE_EXHAUSTED = "2200H"
"""PostgreSQL's sequence_generator_limit_exceeded: no id is left to give."""


def handle_data_error(error):
    """A value the database refuses (out of its type's range, say): a 400, as
    the request's values are what it refused; ids run out: a 503, logged as
    the operator's to fix. Never a 500."""
    reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
    driver_errors = (error.__cause__, error.__context__, *error.args)
    if any(getattr(cause, "pgcode", None) == SEQUENCE_EXHAUSTED for cause in driver_errors):
        log.error("the database has no id left to give: %s", reason)
        return database_unavailable_response()
    log.warning("the database refused a value of the request: %s", reason)
    return error_response(400, "A value in the request cannot be stored.")


def handle_unexpected_exception(error):
    """Log a bug with its traceback; tell the client only that it happened.
    A database error the schema explains (older or newer than this release,
    or none: see ``db.faults``) is a 503 logged in one line instead."""
    if isinstance(error, HTTPException):
        return handle_http_exception(error)
    if isinstance(error, DatabaseError):
        fault = faults.schema_fault()
        if fault:
            log.warning("database unavailable: %s (%s)", fault,
                        (str(error).strip().splitlines() or [type(error).__name__])[0])
            return database_unavailable_response()
    log.error("unhandled error", exc_info=error)
    return handle_http_exception(InternalServerError())


def register_error_handlers(app):
    """Route every error the app can raise through the one JSON shape."""
    app.register_error_handler(HTTPException, handle_http_exception)
    for failure in DATABASE_FAILURES:
        app.register_error_handler(failure, handle_database_failure)
    app.register_error_handler(DataError, handle_data_error)
    app.register_error_handler(Exception, handle_unexpected_exception)
