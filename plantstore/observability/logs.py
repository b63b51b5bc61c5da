"""Log lines, one per record, with no secret in them: JSON or text.

``JSONFormatter`` writes a record as one JSON line carrying the id of the
request being served and, while a span is active (``plantstore.observability.tracing``),
its ``trace_id`` and ``span_id``; ``TextFormatter`` writes the same entry as
a line a person reads in a terminal. ``PLANTSTORE_LOG_FORMAT`` picks one
(``log_format``); ``configure_process_logging`` sets it up for the
``plantstore`` command (gunicorn's set-up is in ``plantstore.server.gunicorn``).

Bearer tokens never reach a log line: ``redact`` masks anything shaped like
one (a token with a prefix an app was configured with, ``Bearer x`` whatever
follows but the words prose puts there, an ``access_token`` query
parameter) before a line is written.
"""
import contextvars
import datetime
import json
import logging
import logging.config
import os
import re
import sys
import threading

from .. import settings
from . import tracing

DEFAULT_TOKEN_PREFIX = "pst_"

NOT_CREDENTIALS = frozenset({"token", "tokens", "token's", "tokens'"})
"""What follows "bearer" in a sentence ("bearer tokens are stored..."), never
a credential: left as it is, whatever its case and a full stop or colon after it."""


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
        return self.pattern.sub(_masked, text)

    def may_hold_secrets(self, values):
        """False when no text among ``values`` has anything to mask.

        One search over the texts joined by newlines: a secret found in one
        value is found in the joined text, so redacting value by value is
        only needed when this says True.
        """
        return self.pattern.search("\n".join(
            value for value in values if isinstance(value, str))) is not None


def _masked(match):
    """A secret ``Redactor.pattern`` found, masked (a word of prose kept)."""
    scheme = match.group(1)
    if scheme and scheme.lower().startswith("bearer") \
            and match.group(0)[len(scheme):].rstrip(".:").lower() in NOT_CREDENTIALS:
        return match.group(0)
    return (scheme or "") + "[REDACTED]"


redact = Redactor()

# Where request_ids.py leaves the id of the request being served: in the
# WSGI environ (for the access log) and, while the request is served, here.
REQUEST_ID_ENVIRON_KEY = "plantstore.request_id"
serving_request_id = contextvars.ContextVar("plantstore.request_id", default=None)


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
    if not entry.get("request_id"):
        request_id = serving_request_id.get()
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


# Fields the text line leaves out: its message already says them (an access
# line's message is "GET /plants 200").
_SAID_BY_THE_MESSAGE = ("method", "path", "status")

_NOT_PLAIN_ASCII = re.compile(r"[^\x20-\x7e]")


def one_line(text):
    """``text`` on one line, safe for a terminal: line breaks and other
    characters that are not printable (ESC, which starts a sequence that
    restyles or rewrites the screen; CR; U+2028) shown as Python escapes,
    ``\\n``, ``\\x1b``, so no one who sends text can forge a line."""
    if not _NOT_PLAIN_ASCII.search(text):
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def _text_value(value):
    """A field's value as ``key=value`` shows it: quoted (as JSON, which
    escapes it) when it has spaces, quotes or characters that are not printable."""
    text_value = value if isinstance(value, str) else encode_json(value)
    if not text_value or re.search(r"[\s\"=]", text_value) or one_line(text_value) != text_value:
        return encode_json(text_value)  # escapes all but printable ASCII
    return text_value


class TextFormatter(logging.Formatter):
    """A log record as a line for a person: time, pid, level, logger, message,
    then the other fields as ``key=value`` (a traceback on the lines after,
    each indented, so only a record's first line starts at the margin).

    The entry is ``json_entry``'s, so it is redacted and carries the request
    and trace ids exactly as the JSON line would. What a client or a
    receiver sent (a path, a header) is escaped: no line break or escape
    sequence in it reaches the log (``one_line``).
    """

    def format(self, record):
        entry = json_entry(record.created, record.levelname.lower(), record.name,
                           record.process, record.getMessage(),
                           getattr(record, "fields", None))
        head = (f"{entry.pop('ts')} [{entry.pop('pid')}] {entry.pop('level').upper():<7} "
                f"{entry.pop('logger')}: {one_line(str(entry.pop('message')))}")
        fields = " ".join(f"{key}={_text_value(value)}" for key, value in entry.items()
                          if value is not None and key not in _SAID_BY_THE_MESSAGE)
        line = f"{head}  {fields}" if fields else head
        if record.exc_info:
            traceback = redact(self.formatException(record.exc_info))
            line += "".join(f"\n  {one_line(part)}" for part in traceback.splitlines())
        return line


LOG_FORMAT = next(setting for setting in settings.SETTINGS if setting.key == "LOG_FORMAT")


def log_format(environ=None, stream=None):
    """``json`` or ``text``: ``PLANTSTORE_LOG_FORMAT``, where ``auto`` (the
    default) is text when ``stream`` (stderr) is a terminal, JSON otherwise.

    A value that is not allowed raises ``settings.SettingError``.
    """
    environ = os.environ if environ is None else environ
    chosen = LOG_FORMAT.read(environ.get(LOG_FORMAT.env_name, LOG_FORMAT.default))
    if chosen != "auto":
        return chosen
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return "text" if isatty is not None and isatty() else "json"


def logconfig(level="INFO"):
    """A ``logging.config`` dict: lines in ``log_format()``, the root logger to stderr."""
    formatter = {"json": "plantstore.observability.logs.JSONFormatter",
                 "text": "plantstore.observability.logs.TextFormatter"}[log_format()]
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"line": {"()": formatter}},
        "handlers": {
            "stdout": {"class": "logging.StreamHandler", "formatter": "line",
                       "stream": "ext://sys.stdout"},
            "stderr": {"class": "logging.StreamHandler", "formatter": "line",
                       "stream": "ext://sys.stderr"},
        },
        # `plantstore db upgrade` prints each migration it applies; peewee's
        # runner would log each a second time.
        "loggers": {"peewee.migrations": {"level": "WARNING"}},
        "root": {"level": level, "handlers": ["stderr"]},
    }


def configure_process_logging():
    """Log lines on stderr for the ``plantstore`` command, at ``LOG_LEVEL`` (info),
    in ``PLANTSTORE_LOG_FORMAT`` (``settings.SettingError`` when unusable)."""
    logging.config.dictConfig(logconfig(os.environ.get("LOG_LEVEL", "info").upper()))
