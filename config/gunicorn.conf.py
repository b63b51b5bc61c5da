"""gunicorn settings for plantstore, used by ``plantstore web`` (which checks
the variables below first, then runs ``gunicorn -c config/gunicorn.conf.py wsgi:app``).

Environment:
  HOST, PORT         where to listen (default 127.0.0.1:8000); GUNICORN_BIND
                     (e.g. unix:/run/plantstore.sock) replaces both
  WEB_CONCURRENCY    worker processes (default: 2 per CPU core)
  GUNICORN_WORKER_CLASS, GUNICORN_THREADS
                     worker class (default gthread) and threads per worker
                     (8 for gthread, else 1)
  GUNICORN_TIMEOUT, GUNICORN_GRACEFUL_TIMEOUT
                     seconds before a silent worker is killed, and seconds
                     in-flight requests get to finish after SIGTERM (30, 30)
  LOG_LEVEL          gunicorn and application log level (default info)
  PROMETHEUS_MULTIPROC_DIR
                     where workers keep metric counts for /metrics; when
                     unset, a fresh temporary directory per server start
  GUNICORN_CONTROL_SOCKET
                     gunicornc control socket path (default: none)
  OTEL_EXPORTER_OTLP_ENDPOINT and the other OTEL_* variables
                     traces to an OTLP collector (docs/operating.md, "Tracing")

Logs are JSON lines (text lines when stderr is a terminal; PLANTSTORE_LOG_FORMAT
decides): access lines on stdout, everything else on stderr.
"""
import multiprocessing
import os
import sys
import tempfile

# A read-only root without a tmpfs on /tmp leaves tempfile no directory:
# gunicorn's worker heartbeat files and the metrics directory below then go
# to /dev/shm (in memory, writable in containers), the workers inheriting
# TMPDIR; without that either, one line says what to mount.
try:
    tempfile.gettempdir()
except FileNotFoundError:
    os.environ["TMPDIR"] = "/dev/shm"
    try:
        tempfile.gettempdir()
    except FileNotFoundError:
        print("Error: no writable temporary directory (TMPDIR, /tmp, /var/tmp, /dev/shm): "
              "mount a tmpfs on /tmp (docker run --tmpfs /tmp) or set TMPDIR to a writable "
              "directory", file=sys.stderr)
        sys.exit(1)

# Metric storage must be chosen before prometheus_client is first imported
# (below, through plantstore), and the workers inherit it from here.
# A directory made here is remembered in the environment, so a configuration
# reload (SIGHUP) neither makes another one nor forgets to remove it.
if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="plantstore-metrics-")
    os.environ["GUNICORN_OWNED_METRICS_DIR"] = os.environ["PROMETHEUS_MULTIPROC_DIR"]
try:
    os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)
except OSError as error:  # as plantstore.server.launch's check says it, exit status 2
    print(f"Error: PROMETHEUS_MULTIPROC_DIR must be a directory this user can make and "
          f"write ({error.strerror}), not {os.environ['PROMETHEUS_MULTIPROC_DIR']!r}",
          file=sys.stderr)
    sys.exit(2)

# Imported here, in the master, so post_fork stays instant: a SIGTERM that
# reaches a worker before gunicorn installs its signal handlers is lost. The
# app's modules too (plantstore.app), so that the workers inherit them rather
# than each import them after its fork (the app itself is built in each).
import plantstore.app
from plantstore.server import binds, start
from plantstore.server import gunicorn as plantstore_gunicorn

if os.environ.get("PLANTSTORE_RATE_LIMIT", "").strip():  # and a limit's counting, if set
    import plantstore.web.rate_limiter  # noqa: F401

# An unusable PLANTSTORE_* setting, an unusable value of one of the variables
# read below, or an address gunicorn cannot listen on (that of --bind if
# given, else the bind below) stops the server here, in one line, before it binds.
start.check_configuration(sys.argv[1:])
# With the OTEL_* variables set, what tracing needs is imported here, once;
# each worker starts its own exporting after the fork (see post_fork).
plantstore_gunicorn.prepare_tracing()
# Requests gunicorn refuses itself (URI too long, too many headers,
# malformed HTTP) get the service's JSON error shape, not an HTML page.
plantstore_gunicorn.answer_protocol_errors_in_json()

bind = binds.default_bind(os.environ)  # GUNICORN_BIND, else HOST:PORT ([HOST]:PORT for IPv6)
workers = int(os.environ.get("WEB_CONCURRENCY", multiprocessing.cpu_count() * 2))
# gthread with 8 threads on SQLite and PostgreSQL alike, chosen by
# measurement (docs/server-model.md: make bench-ab, sync against gthread,
# both databases, with and without nginx keeping its connections alive).
# sync costs as much CPU per request or more, except a PostgreSQL list of
# 100 behind nginx (0.82x), serves half the creates, and serves one request
# per process: a slow client (without nginx), a stalled SQLite writer or a
# locked PostgreSQL table then holds every process, and /healthz with it
# (tests/db/test_sqlite_turns.py fails on sync). Threads keep a worker
# answering while some of its requests wait.
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "gthread")
# Eight threads, chosen on PostgreSQL (make bench-ab, 5 alternating runs of
# 4 s, medians of paired ratios, 8 threads / 4): list of 100 1.16x, list of
# 10 1.09x, create 1.34x (a create waits on the commit's disk flush, when
# other threads can run). On SQLite the same A/B was within its noise.
# gunicorn turns a sync worker into gthread whenever threads > 1: the
# default applies to gthread only, so GUNICORN_WORKER_CLASS=sync alone
# really gives sync workers. PLANTSTORE_DATABASE_POOL_SIZE must exceed the
# threads (the webhook outcome writer takes a connection too).
threads = int(os.environ.get("GUNICORN_THREADS", 8 if worker_class == "gthread" else 1))
# The C HTTP parser (gunicorn_h1c, from gunicorn[fast]): as fast as the
# Python one here (make bench-ab on PostgreSQL: 1.01x, 1.04x, 0.89x, within
# the noise; parsing is a small part of a request), and stricter about
# malformed framing (chunk extensions), which the framing tests pin.
http_parser = "fast"
# On SIGTERM, stop accepting and let in-flight requests finish for up to
# graceful_timeout seconds before workers are killed.
graceful_timeout = int(os.environ.get("GUNICORN_GRACEFUL_TIMEOUT", 30))
timeout = int(os.environ.get("GUNICORN_TIMEOUT", 30))
keepalive = 5
# One shared default control socket path would make several instances on a
# machine fight over it; set GUNICORN_CONTROL_SOCKET to use gunicornc.
control_socket = os.environ.get("GUNICORN_CONTROL_SOCKET", "")
control_socket_disable = not control_socket

# X-Forwarded-* headers are interpreted in one place, the app (ProxyFix, as
# many hops as PLANTSTORE_TRUSTED_PROXIES says); gunicorn's own handling,
# which believes X-Forwarded-Proto from loopback and unix sockets, is off.
forwarded_allow_ips = ""
secure_scheme_headers = {}
forwarder_headers = ""

accesslog = "-"
errorlog = "-"
loglevel = os.environ.get("LOG_LEVEL", "info")
logger_class = "plantstore.server.gunicorn.JSONAccessLogger"
logconfig_dict = plantstore_gunicorn.logconfig(loglevel.upper())

# A worker drops the database connections it inherited, honours a stop
# sent while it booted and sets up its tracing (see plantstore/server/gunicorn.py).
post_fork = plantstore_gunicorn.reset_after_fork
# A kept-alive connection is closed after 25 requests, so the processes
# share a client's connections instead of one keeping them all
# (docs/server-model.md, "Balanced processes").
pre_request = plantstore_gunicorn.close_after_requests
# Metrics: a worker that exited is forgotten; the temporary metrics
# directory made above is removed when the server stops.
child_exit = plantstore_gunicorn.forget_exited_worker
# A worker stopping gracefully lets its webhook attempts under way end (each
# by its deadline, connect + read timeout), writes their outcomes, then
# exports its last spans (at most 5 s); then it ignores a late Ctrl-C or SIGQUIT.
worker_exit = plantstore_gunicorn.before_worker_exit
on_exit = start.remove_owned_metrics_dir
