"""Structured logs: one JSON object per line, with no secret in it.

``JSONFormatter`` writes a record as one JSON line carrying the id of the
request being served and, while a span is active (``plantstore.tracing``),
its ``trace_id`` and ``span_id``; ``configure_process_logging`` sets it up for the
``plantstore`` command (gunicorn's set-up is in ``plantstore.gunicorn``).

Bearer tokens never reach a log line: ``redact`` masks anything shaped like
one (a token with a prefix an app was configured with, ``Bearer x`` whatever
follows, an ``access_token`` query parameter) before a line is written.
"""
import datetime
import json
import logging
import logging.config
import os
import re
import threading

from flask import has_request_context, request

from . import tracing

DEFAULT_TOKEN_PREFIX = "pst_"


class Redactor:
    """Masks token-shaped secrets; knows every token prefix an app was built with."""

    def __init__(self):
        self._lock = threading.Lock()
        self._prefixes = set()
        self.pattern = None
        self.add_prefix(DEFAULT_TOKEN_PREFIX)

    def add_prefix(self, prefix):
        """Mask tokens starting with ``prefix`` from now on."""
        with self._lock:
            if prefix in self._prefixes:
                return
            self._prefixes.add(prefix)
            prefixes = "|".join(re.escape(p) for p in sorted(self._prefixes, key=len,
                                                              reverse=True))
            self.pattern = re.compile(
                rf"(?:{prefixes})[A-Za-z0-9_\-]+|(?i:(bearer\s+|access_token=))[^\s&\"',;]+")

    def __call__(self, text):
        """``text`` with every token-shaped secret replaced by ``[REDACTED]``."""
        if not isinstance(text, str):
            return text
        return self.pattern.sub(lambda m: (m.group(1) or "") + "[REDACTED]", text)

    def may_hold_secrets(self, values):
        """False when no text among ``values`` has anything to mask.

        One search over the texts joined by newlines: a secret found in one
        value is found in the joined text, so redacting value by value is
        only needed when this says True.
        """
        return self.pattern.search("\n".join(
            value for value in values if isinstance(value, str))) is not None


redact = Redactor()

# Where request_ids.py leaves the id of the request being served.
REQUEST_ID_ENVIRON_KEY = "plantstore.request_id"


def init_logging(app):
    """Mask tokens with ``app``'s configured prefix in every log line."""
    redact.add_prefix(app.config["TOKEN_PREFIX"])


def _utc_timestamp(created):
    """A record's creation time as ISO 8601 UTC with milliseconds."""
    return datetime.datetime.fromtimestamp(created, datetime.timezone.utc) \
        .isoformat(timespec="milliseconds").replace("+00:00", "Z")


# One encoder for every line (json.dumps(default=...) builds one per call).
encode_json = json.JSONEncoder(default=str).encode


def json_entry(created, level, logger, pid, message, fields):
    """The object of one log line, without its ``exception`` (see ``JSONFormatter``)."""
    entry = {
        "ts": _utc_timestamp(created),
        "level": level,
        "logger": logger,
        "pid": pid,
        "message": redact(message),
    }
    if fields:
        if redact.may_hold_secrets(fields.values()):
            entry.update((key, redact(value)) for key, value in fields.items())
        else:
            entry.update(fields)
    if not entry.get("request_id") and has_request_context():
        request_id = request.environ.get(REQUEST_ID_ENVIRON_KEY)
        if request_id:
            entry["request_id"] = request_id
    if "trace_id" not in entry:
        ids = tracing.log_ids()
        if ids:
            entry["trace_id"], entry["span_id"] = ids
    return entry


class JSONFormatter(logging.Formatter):
    """A log record as one JSON object on one line.

    Keys: ``ts`` (UTC, ISO 8601), ``level``, ``logger``, ``pid``, ``message``,
    ``request_id`` (when known), ``trace_id`` and ``span_id`` (while a span
    is active), the record's ``fields`` (passed as
    ``extra={"fields": {...}}``) and ``exception`` (the traceback text).
    """

    def format(self, record):
        entry = json_entry(record.created, record.levelname.lower(), record.name,
                           record.process, record.getMessage(),
                           getattr(record, "fields", None))
        if record.exc_info:
            entry["exception"] = redact(self.formatException(record.exc_info))
        return encode_json(entry)


def logconfig(level="INFO"):
    """A ``logging.config`` dict: JSON lines, the root logger to stderr."""
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
    }


def configure_process_logging():
    """JSON lines on stderr for the ``plantstore`` command, at ``LOG_LEVEL`` (info)."""
    logging.config.dictConfig(logconfig(os.environ.get("LOG_LEVEL", "info").upper()))
