"""Everything gunicorn-specific, used by ``config/gunicorn.conf.py``.

- ``JSONAccessLogger``: gunicorn's logger with a JSON (or text) access line.
- ``logconfig``: the ``logconfig_dict`` sending gunicorn's and the app's
  records as JSON or text lines, access lines to stdout, the rest to stderr.
- ``answer_protocol_errors_in_json``: requests gunicorn refuses itself (URI
  too long, too many headers, malformed HTTP) get the service's JSON error
  shape instead of an HTML page.
- ``reset_after_fork``: a worker forgets the database connections and the
  signal queue it inherited from the master, and sets up its own tracing
  (``prepare_tracing`` imports what that needs, in the master).
- ``close_after_requests``: a kept-alive connection is closed after
  ``KEEPALIVE_REQUESTS`` requests, so connections are spread over the
  processes again as clients make them anew.
- ``before_worker_exit``: a stopping worker's webhook attempts end and its
  last spans are exported; then it ignores further quits.
- ``forget_exited_worker``: the per-worker metric files of
  prometheus_client's multiprocess mode.

The master's checks before it binds are ``start.py``'s.
"""
import functools
import json
import logging
import os
import queue
import signal
import time

from flask import Flask
from gunicorn import glogging, util
from gunicorn.http.errors import LimitRequestLine
from gunicorn.workers.base import Worker
from prometheus_client import multiprocess

from ..db import database
from ..observability import logs, tracing
from ..webhooks.config import web_sender_of


class JSONAccessLogger(glogging.Logger):
    """gunicorn's logger, whose access line is a JSON object.

    Only the fields below are gathered, instead of gunicorn's every header
    and environ variable, so a request pays little for its line. With the
    logging set-up of ``logconfig`` the line is written straight to the
    access handler's stream, byte for byte what ``logs.JSONFormatter`` would
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
            "request_id": environ.get(logs.REQUEST_ID_ENVIRON_KEY),
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
        # The request's span has ended by now: its ids come from the environ.
        trace_ids = environ.get(tracing.ENVIRON_KEY)
        if trace_ids:
            fields["trace_id"], fields["span_id"] = trace_ids
        try:
            handler = _plain_json_stream_handler(self.access_log)
            if handler is None:  # escaped here too, whatever formatter an operator set
                self.access_log.info("%s %s %s", logs.one_line(str(method)),
                                     logs.one_line(str(path)), status,
                                     extra={"fields": fields})
                return
            line = logs.encode_json(logs.json_entry(
                time.time(), "info", self.access_log.name, os.getpid(),
                f"{method} {path} {status}", fields))
            with handler.lock:
                handler.stream.write(line + handler.terminator)
                handler.flush()
        except Exception:  # a log line must never break a response
            self.exception("could not write the access log line")


def _plain_json_stream_handler(logger):
    """The handler to write ``logger``'s INFO lines to directly, or None.

    That is its one ``StreamHandler`` formatting with ``JSONFormatter``
    (what ``logconfig`` sets up), when nothing else (filters, levels,
    propagation to other handlers) could change what logging would do with
    the record. Any other set-up goes through logging as usual.
    """
    handlers = logger.handlers
    if len(handlers) != 1 or logger.propagate or logger.filters \
            or not logger.isEnabledFor(logging.INFO):
        return None
    handler = handlers[0]
    if type(handler) is not logging.StreamHandler \
            or type(handler.formatter) is not logs.JSONFormatter \
            or handler.filters or handler.level > logging.INFO:
        return None
    return handler


def logconfig(level="INFO"):
    """gunicorn's ``logconfig_dict``: lines in ``PLANTSTORE_LOG_FORMAT``, access
    to stdout, the rest to stderr."""
    config = logs.logconfig(level)
    config["loggers"] = {
        **config["loggers"],
        "gunicorn.error": {"level": level, "handlers": ["stderr"], "propagate": False},
        "gunicorn.access": {"level": "INFO", "handlers": ["stdout"], "propagate": False},
    }
    return config


def write_json_error(sock, status_int, reason, mesg):
    """gunicorn's ``util.write_error``, answering JSON instead of HTML."""
    message = f"{reason}: {mesg}" if mesg else reason
    if not message.endswith("."):
        message += "."
    # ensure_ascii keeps the body ASCII, so its length in characters is its
    # length in bytes and latin-1 (what gunicorn writes) can encode it.
    body = json.dumps({"error": status_int, "message": message})
    head = (f"HTTP/1.1 {status_int} {reason}\r\n"
            "Connection: close\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    util.write_nonblock(sock, (head + body).encode("latin-1"))


_gunicorn_handle_error = Worker.handle_error


def handle_error(worker, req, client, addr, exc):
    """gunicorn's ``Worker.handle_error``, but a request line over the limit is
    a 414 URI Too Long, as HTTP says (gunicorn 27 answers 400).

    The request line could not be read, so there is no request to log an
    access line for.
    """
    if not isinstance(exc, LimitRequestLine):
        return _gunicorn_handle_error(worker, req, client, addr, exc)
    worker.log.warning("Invalid request from ip=%s: %s", (addr or ("",))[0], exc)
    try:
        write_json_error(client, 414, "URI Too Long", str(exc))
    except Exception:
        worker.log.debug("Failed to send error message.")


def answer_protocol_errors_in_json():
    """Make gunicorn (this process and the workers it forks) answer in JSON,
    with the statuses HTTP gives each kind of refusal."""
    util.write_error = write_json_error
    Worker.handle_error = handle_error


def reset_after_fork(server, worker):
    """Drop inherited database connections; never lose an early SIGTERM; set
    up this worker's tracing (one span export thread per worker, none in the
    master), when the ``OTEL_*`` variables turn it on.

    Until the worker installs its own signal handlers (next, in
    init_process), a SIGTERM runs the master's handler, which only queues it
    in this process's copy of the master's queue: a stop sent while the
    worker boots would be ignored until the graceful timeout kills it. From
    here on gunicorn's base handlers take it: a SIGTERM ends the worker as
    soon as it has booted, and a Ctrl-C (SIGINT) or a SIGQUIT (sent to the
    whole process group by a terminal) ends it at once with status 0; one
    already queued is honoured as a SIGTERM. The base handlers, not the
    worker class's: gthread's wake its poller and stop its thread pool,
    which its init_process has not made yet.
    """
    signal.signal(signal.SIGTERM, functools.partial(Worker.handle_exit, worker))
    signal.signal(signal.SIGINT, functools.partial(Worker.handle_quit, worker))
    signal.signal(signal.SIGQUIT, functools.partial(Worker.handle_quit, worker))
    if database.obj is not None:
        database.dispose()
    if _stop_was_queued(server.SIG_QUEUE):
        worker.alive = False
    try:
        tracing.start()
    except Exception as error:  # the worker serves untraced rather than not at all
        worker.log.warning("tracing could not start: %s", error)


def prepare_tracing():
    """In the master, when tracing is on: import the SDK and the exporter, so
    that each worker's set-up after its fork is quick. Starts nothing."""
    tracing.preload()


def _stop_was_queued(signals):
    """Whether the master's signal queue (as copied into a worker) holds a stop."""
    stops = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)
    if isinstance(signals, list):  # gunicorn < 24
        return any(sig in stops for sig in signals)
    found = False
    while True:
        try:
            found = signals.get_nowait() in stops or found
        except queue.Empty:
            return found


KEEPALIVE_REQUESTS = 25
"""Requests a kept-alive connection serves before it is closed (nginx's
``keepalive_requests`` for gunicorn's side)."""


def close_after_requests(worker, req):
    """gunicorn ``pre_request``: a connection's ``KEEPALIVE_REQUESTS``-th
    request is answered with ``Connection: close``.

    The processes share one listening socket, and a gthread worker accepts
    every connection it can: one process could keep every kept-alive
    connection of a client (or of nginx) while another stays idle. Made
    anew, a connection goes to whichever process accepts it first, most
    often the least busy one (docs/server-model.md, "Balanced processes").
    """
    if req.req_number >= KEEPALIVE_REQUESTS:
        req.force_close()


def finish_webhook_attempts(server, worker):
    """Before a worker exits (gunicorn ``worker_exit``): let its webhook
    attempts under way end, each by its deadline, and their outcomes be
    written, so a restart sends nothing again that a receiver already has."""
    app = getattr(worker, "wsgi", None)
    if not isinstance(app, Flask):  # the app failed to load: nothing was sent
        return
    web_sender_of(app).finish()


def before_worker_exit(server, worker):
    """gunicorn ``worker_exit``, on every way out of a worker: webhook
    attempts under way end and their outcomes are written
    (``finish_webhook_attempts``), then the spans still waiting are
    exported, within ``tracing.FLUSH_SECONDS``. After that the worker
    ignores further quits: a Ctrl-C reaches the whole process group and the
    master then sends each worker a SIGQUIT of its own, which, taken as the
    interpreter exits, printed a traceback."""
    try:
        finish_webhook_attempts(server, worker)
    finally:
        tracing.shutdown()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGQUIT, signal.SIG_IGN)


def forget_exited_worker(server, worker):
    """Forget the live gauges of a worker that exited (gunicorn ``child_exit``)."""
    multiprocess.mark_process_dead(worker.pid)
