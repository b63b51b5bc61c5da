"""gunicorn settings for plantstore: ``gunicorn -c config/gunicorn.conf.py wsgi:app``.

Bind and worker count come from the environment (PORT, WEB_CONCURRENCY), as
on most platforms; everything else is fixed here.
"""
import multiprocessing
import os

# Imported here, in the master, so post_fork stays instant: a SIGTERM that
# reaches a worker before gunicorn installs its signal handlers is lost.
from plantstore.db import reset_after_fork

bind = os.environ.get("GUNICORN_BIND") or f"{os.environ.get('HOST', '127.0.0.1')}:{os.environ.get('PORT', '8000')}"
workers = int(os.environ.get("WEB_CONCURRENCY", multiprocessing.cpu_count() * 2))
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "sync")
# Let in-flight requests finish on SIGTERM before workers are stopped.
graceful_timeout = 30
timeout = 30
keepalive = 5
# One shared default control socket path would make several instances on a
# machine fight over it; set GUNICORN_CONTROL_SOCKET to use gunicornc.
control_socket = os.environ.get("GUNICORN_CONTROL_SOCKET", "")
control_socket_disable = not control_socket
accesslog = "-"
errorlog = "-"


def post_fork(server, worker):
    """Drop database connections a worker inherited from the master."""
    reset_after_fork()
