"""Liveness and readiness probes: no token, no database for liveness."""
from flask import Blueprint

from ..db import faults
from .errors import database_unavailable_response

blp = Blueprint("health", __name__)


@blp.get("/healthz")
def healthz():
    """The process is up and answering."""
    return {"status": "ok"}


@blp.get("/readyz")
def readyz():
    """The database answers a query, its schema is this release's, and on
    SQLite its file is the one opened, its disk has room and a write can
    begin: the instance can take traffic. A fault is logged (one line) when
    it starts and when it ends."""
    try:
        fault = faults.find()
        message = fault and f"Not ready: {faults.public(fault)}."
    except Exception as error:  # any driver error means "not ready", never a 500
        fault = (str(error).strip().splitlines() or [type(error).__name__])[0]
        message = None  # a driver's words may name hosts: in the log only
    faults.log_once(fault)
    if fault:
        return (database_unavailable_response(message) if message
                else database_unavailable_response())
    return {"status": "ready"}
