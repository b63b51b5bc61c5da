"""Liveness and readiness probes: no token, no database for liveness."""
from flask import Blueprint

from .db import database
from .errors import database_unavailable_response

blp = Blueprint("health", __name__)


@blp.get("/healthz")
def healthz():
    """The process is up and answering."""
    return {"status": "ok"}


@blp.get("/readyz")
def readyz():
    """The database answers a query: the instance can take traffic."""
    try:
        database.execute_sql("SELECT 1").fetchone()
    except Exception:  # any driver error means "not ready", never a 500
        return database_unavailable_response()
    return {"status": "ready"}
