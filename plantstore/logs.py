"""Structured logs: one JSON object per line, each carrying a request id.

- ``init_request_ids(app)`` gives every request an id: the client's
  ``X-Request-ID`` when it is sane (1 to 128 characters of ``[A-Za-z0-9._-]``),
  a fresh one otherwise. The id is returned in the response's ``X-Request-ID``
  header and left in the WSGI environ for the log lines.
- ``JSONFormatter`` writes application records as JSON, with the id of the
  request being served.
- ``JSONAccessLogger`` is gunicorn's logger with a JSON access line.
- ``gunicorn_logconfig()`` is the ``logconfig_dict`` that routes gunicorn's
  and the application's records through ``JSONFormatter`` to stdout/stderr;
  ``configure_process_logging()`` does the same for the ``plantstore``
  command (the webhook worker among others).

Bearer tokens never reach a log line: ``redact`` masks anything shaped like
one before a line is written.
"""
import datetime
import json
import logging
import logging.config
import os
import re
import secrets
import time

from flask import has_request_context, request
from gunicorn import glogging

REQUEST_ID_HEADER = "X-Request-ID"
REQUEST_ID_ENVIRON_KEY = "plantstore.request_id"
SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")

# A token is the configured prefix then url-safe characters; "Bearer x" is
# masked whatever follows, and so is an access_token query parameter.
_TOKEN_PREFIX = re.escape(os.environ.get("PLANTSTORE_TOKEN_PREFIX", "pst_"))
_SECRETS = re.compile(
    rf"{_TOKEN_PREFIX}[A-Za-z0-9_\-]+|(?i:(bearer\s+|access_token=))[^\s&\"',;]+")


def redact(text):
    """``text`` with every token-shaped secret replaced by ``[REDACTED]``."""
    if not isinstance(text, str):
        return text
    return _SECRETS.sub(lambda m: (m.group(1) or "") + "[REDACTED]", text)


def request_id_from(header_value):
    """The client's request id if it is sane (and no token), else a new one."""
    if header_value and SANE_REQUEST_ID.fullmatch(header_value) \
            and redact(header_value) == header_value:
        return header_value
    return secrets.token_hex(16)


def current_request_id():
    """The id of the request being served, or None outside a request."""
    if has_request_context():
        return request.environ.get(REQUEST_ID_ENVIRON_KEY)
    return None


class RequestIdMiddleware:
    """WSGI middleware giving every request an id, returned on its response.

    Done at the WSGI level rather than in Flask hooks: it costs a request
    one function call, and errors answered by any layer still carry the id.
    """

    def __init__(self, wsgi_app):
        self.wsgi_app = wsgi_app

    def __call__(self, environ, start_response):
        request_id = request_id_from(environ.get("HTTP_X_REQUEST_ID"))
        environ[REQUEST_ID_ENVIRON_KEY] = request_id

        def start_with_request_id(status, headers, exc_info=None):
            headers.append((REQUEST_ID_HEADER, request_id))
            return start_response(status, headers, exc_info)
        return self.wsgi_app(environ, start_with_request_id)


def init_request_ids(app):
    """Give every request of ``app`` an id (see ``RequestIdMiddleware``)."""
    app.wsgi_app = RequestIdMiddleware(app.wsgi_app)


def _utc_timestamp(created):
    """A record's creation time as ISO 8601 UTC with milliseconds."""
    return datetime.datetime.fromtimestamp(created, datetime.timezone.utc) \
        .isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _may_hold_secrets(values):
    """False when no text among ``values`` has anything for ``redact`` to mask.

    One search over the texts joined by newlines: a secret found in one
    value is found in the joined text, so redacting value by value is only
    needed when this says True.
    """
    return _SECRETS.search("\n".join(
        value for value in values if isinstance(value, str))) is not None


# One encoder for every line (json.dumps(default=...) builds one per call).
_encode_json = json.JSONEncoder(default=str).encode


def _json_entry(created, level, logger, pid, message, fields):
    """The object of one log line, without its ``exception`` (see ``JSONFormatter``)."""
    entry = {
        "ts": _utc_timestamp(created),
        "level": level,
        "logger": logger,
        "pid": pid,
        "message": redact(message),
    }
    if fields:
        if _may_hold_secrets(fields.values()):
            entry.update((key, redact(value)) for key, value in fields.items())
        else:
            entry.update(fields)
    if not entry.get("request_id"):
        request_id = current_request_id()
        if request_id:
            entry["request_id"] = request_id
    return entry


class JSONFormatter(logging.Formatter):
    """A log record as one JSON object on one line.

    Keys: ``ts`` (UTC, ISO 8601), ``level``, ``logger``, ``pid``, ``message``,
    ``request_id`` (when known), the record's ``fields`` (passed as
    ``extra={"fields": {...}}``) and ``exception`` (the traceback text).
    """

    def format(self, record):
        entry = _json_entry(record.created, record.levelname.lower(), record.name,
                            record.process, record.getMessage(),
                            getattr(record, "fields", None))
        if record.exc_info:
            entry["exception"] = redact(self.formatException(record.exc_info))
        return _encode_json(entry)


def _plain_json_stream_handler(logger):
    """The handler to write ``logger``'s INFO lines to directly, or None.

    That is its one ``StreamHandler`` formatting with ``JSONFormatter``
    (what ``gunicorn_logconfig`` sets up), when nothing else (filters,
    levels, propagation to other handlers) could change what logging would
    do with the record. Any other set-up goes through logging as usual.
    """
    handlers = logger.handlers
    if len(handlers) != 1 or logger.propagate or logger.filters \
            or not logger.isEnabledFor(logging.INFO):
        return None
    handler = handlers[0]
    if type(handler) is not logging.StreamHandler \
            or type(handler.formatter) is not JSONFormatter \
            or handler.filters or handler.level > logging.INFO:
        return None
    return handler


class JSONAccessLogger(glogging.Logger):
    """gunicorn's logger, whose access line is a JSON object.

    Only the fields below are gathered, instead of gunicorn's every header
    and environ variable, so a request pays little for its line. With the
    logging set-up of ``gunicorn_logconfig`` the line is written straight to
    the access handler's stream, byte for byte what ``JSONFormatter`` would
    make of the record, without building the record and passing it through
    logging's layers (a tenth of a worker's time under load).
    """

    def access(self, resp, req, environ, request_time):
        if not self.access_log_enabled:
            return
        status = resp.status
        if isinstance(status, str):
            status = status.split(None, 1)[0]
        try:
            status = int(status)
        except (TypeError, ValueError):
            pass
        method = environ.get("REQUEST_METHOD")
        path = environ.get("PATH_INFO")
        fields = {
            "request_id": environ.get(REQUEST_ID_ENVIRON_KEY),
            "remote_addr": environ.get("REMOTE_ADDR"),
            "scheme": environ.get("wsgi.url_scheme"),
            "host": environ.get("HTTP_HOST"),
            "method": method,
            "path": path,
            "query": environ.get("QUERY_STRING") or None,
            "status": status,
            "bytes": getattr(resp, "sent", None),
            "duration_ms": round(request_time.total_seconds() * 1000, 3),
            "user_agent": environ.get("HTTP_USER_AGENT"),
        }
        try:
            handler = _plain_json_stream_handler(self.access_log)
            if handler is None:
                self.access_log.info("%s %s %s", method, path, status,
                                     extra={"fields": fields})
                return
            line = _encode_json(_json_entry(
                time.time(), "info", self.access_log.name, os.getpid(),
                "%s %s %s" % (method, path, status), fields))
            with handler.lock:
                handler.stream.write(line + handler.terminator)
                handler.flush()
        except Exception:  # a log line must never break a response
            self.exception("could not write the access log line")


def gunicorn_logconfig(level="INFO"):
    """gunicorn's ``logconfig_dict``: JSON lines, access to stdout, the rest to stderr."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "plantstore.logs.JSONFormatter"}},
        "handlers": {
            "stdout": {"class": "logging.StreamHandler", "formatter": "json",
                       "stream": "ext://sys.stdout"},
            "stderr": {"class": "logging.StreamHandler", "formatter": "json",
                       "stream": "ext://sys.stderr"},
        },
        "root": {"level": level, "handlers": ["stderr"]},
        "loggers": {
            "gunicorn.error": {"level": level, "handlers": ["stderr"],
                               "propagate": False},
            "gunicorn.access": {"level": "INFO", "handlers": ["stdout"],
                                "propagate": False},
        },
    }


def configure_process_logging():
    """JSON lines on stderr for the ``plantstore`` command, at ``LOG_LEVEL`` (info)."""
    level = os.environ.get("LOG_LEVEL", "info").upper()
    config = gunicorn_logconfig(level)
    del config["loggers"]
    logging.config.dictConfig(config)
