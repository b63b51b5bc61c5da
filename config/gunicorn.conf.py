"""gunicorn settings for plantstore: ``gunicorn -c config/gunicorn.conf.py wsgi:app``.

Environment:
  HOST, PORT         where to listen (default 127.0.0.1:8000); GUNICORN_BIND
                     (e.g. unix:/run/plantstore.sock) replaces both
  WEB_CONCURRENCY    worker processes (default: 2 per CPU core)
  GUNICORN_WORKER_CLASS, GUNICORN_THREADS
                     worker class (default gthread) and threads per worker
                     (4 for gthread, else 1)
  GUNICORN_TIMEOUT, GUNICORN_GRACEFUL_TIMEOUT
                     seconds before a silent worker is killed, and seconds
                     in-flight requests get to finish after SIGTERM (30, 30)
  LOG_LEVEL          gunicorn and application log level (default info)
  PROMETHEUS_MULTIPROC_DIR
                     where workers keep metric counts for /metrics; when
                     unset, a fresh temporary directory per server start
  GUNICORN_CONTROL_SOCKET
                     gunicornc control socket path (default: none)

Logs are JSON lines: access lines on stdout, everything else on stderr.
"""
import multiprocessing
import os
import queue
import shutil
import signal
import tempfile

# Metric storage must be chosen before prometheus_client is first imported
# (below, through plantstore), and the workers inherit it from here.
# A directory made here is remembered in the environment, so a configuration
# reload (SIGHUP) neither makes another one nor forgets to remove it.
if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="plantstore-metrics-")
    os.environ["GUNICORN_OWNED_METRICS_DIR"] = os.environ["PROMETHEUS_MULTIPROC_DIR"]
os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)

# Imported here, in the master, so post_fork stays instant: a SIGTERM that
# reaches a worker before gunicorn installs its signal handlers is lost.
from prometheus_client import multiprocess  # noqa: E402

from plantstore.db import reset_after_fork  # noqa: E402
from plantstore.logs import gunicorn_logconfig  # noqa: E402
from plantstore.protocol_errors import install as answer_protocol_errors_in_json  # noqa: E402

# Requests gunicorn refuses itself (URI too long, too many headers,
# malformed HTTP) get the service's JSON error shape, not an HTML page.
answer_protocol_errors_in_json()

bind = os.environ.get("GUNICORN_BIND") or f"{os.environ.get('HOST', '127.0.0.1')}:{os.environ.get('PORT', '8000')}"
workers = int(os.environ.get("WEB_CONCURRENCY", multiprocessing.cpu_count() * 2))
# gthread, measured with wrk -c8 against 2 workers (see docs/performance.md):
# the sync worker closes every connection after one answer and waits for the
# client's FIN; with keep-alive, gthread served 28% more lists and 89% more
# creates in alternating runs.
# Four threads let a worker keep answering while a create waits on a slow
# webhook receiver (up to the delivery timeouts) instead of stalling.
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "gthread")
# gunicorn turns a sync worker into gthread whenever threads > 1: the
# default of 4 applies to gthread only, so GUNICORN_WORKER_CLASS=sync alone
# really gives sync workers.
threads = int(os.environ.get("GUNICORN_THREADS", 4 if worker_class == "gthread" else 1))
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
logger_class = "plantstore.logs.JSONAccessLogger"
logconfig_dict = gunicorn_logconfig(loglevel.upper())


def post_fork(server, worker):
    """Drop inherited database connections; never lose an early SIGTERM.

    Until the worker installs its own signal handlers (next, in
    init_process), a SIGTERM runs the master's handler, which only queues it
    in this process's copy of the master's queue: a stop sent while the
    worker boots would be ignored until the graceful timeout kills it. From
    here on the worker's own handler takes it, and one already queued is
    honoured: the worker exits as soon as it has booted.
    """
    signal.signal(signal.SIGTERM, worker.handle_exit)
    reset_after_fork()
    if _stop_was_queued(server.SIG_QUEUE):
        worker.alive = False


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


def child_exit(server, worker):
    """Forget the live gauges of a worker that exited (prometheus multiprocess)."""
    multiprocess.mark_process_dead(worker.pid)


def on_exit(server):
    """Remove the temporary metrics directory this server start created.

    A master started by a USR2 upgrade gets the original environment, so it
    makes (and later removes) its own directory: this one is nobody else's.
    """
    owned = os.environ.get("GUNICORN_OWNED_METRICS_DIR")
    if owned and owned == os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        shutil.rmtree(owned, ignore_errors=True)
