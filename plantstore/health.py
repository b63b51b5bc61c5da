"""Liveness and readiness probes: no token, no database for liveness."""
from flask import Blueprint

from .db import database, is_sqlite
from .errors import database_unavailable_response

blp = Blueprint("health", __name__)

WRITE_PROBE_SECONDS = 0.5
"""SQLite: how long readiness waits to see a write begin (a turn lasts milliseconds)."""


@blp.get("/healthz")
def healthz():
    """The process is up and answering."""
    return {"status": "ok"}


@blp.get("/readyz")
def readyz():
    """The database answers a query, and on SQLite a write can begin: the
    instance can take traffic."""
    try:
        database.execute_sql("SELECT 1").fetchone()
        if is_sqlite() and not database.obj.writes_get_through(WRITE_PROBE_SECONDS):
            return database_unavailable_response()
    except Exception:  # any driver error means "not ready", never a 500
        return database_unavailable_response()
    return {"status": "ready"}
