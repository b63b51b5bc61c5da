"""Configuration: built-in defaults, then ``PLANTSTORE_*`` environment variables.

Every key below can be set from the environment by prefixing it with
``PLANTSTORE_`` (``PLANTSTORE_DATABASE_URL=postgresql://...``). Values are
parsed as JSON when they can be (numbers, booleans, lists), as Flask's
``from_prefixed_env`` does, and kept as strings otherwise.
"""

DEFAULTS = {
    # Where plants live: sqlite:///relative.db, sqlite:////absolute.db or
    # postgresql://user:password@host:port/dbname
    "DATABASE_URL": "sqlite:///plantstore.db",
    # Largest Postgres connection pool per process.
    "DATABASE_POOL_SIZE": 8,
    # GET /plants?limit=: value used when absent, and the largest accepted.
    "LIST_LIMIT_DEFAULT": 100,
    "LIST_LIMIT_MAX": 1000,
    # Largest accepted request body in bytes (Flask's own key): over it, 413.
    "MAX_CONTENT_LENGTH": 1024 * 1024,
    # Prefix of every issued bearer token, so leaked tokens are recognisable.
    "TOKEN_PREFIX": "pst_",
    # How many proxies in front of the service may set X-Forwarded-*
    # headers. 0 trusts none (the service is reached directly).
    "TRUSTED_PROXIES": 0,
    # Webhook delivery: timeouts in seconds, retry schedule in seconds
    # (comma-separated), and how long a rotated-out secret keeps signing.
    "WEBHOOK_CONNECT_TIMEOUT": 2.0,
    "WEBHOOK_READ_TIMEOUT": 5.0,
    "WEBHOOK_RETRY_SCHEDULE": "5,300,1800,7200,18000,36000,36000",
    "WEBHOOK_SECRET_OVERLAP_HOURS": 24,
    # Seconds a delivery stays reserved to the request or worker sending it
    # (never less than twice connect + read timeout); a sender that dies
    # leaves its deliveries to the workers once this has passed.
    "WEBHOOK_LEASE_SECONDS": 60,
    # Most bytes of a receiver's response body that are read (and kept).
    "WEBHOOK_MAX_RESPONSE_BYTES": 64 * 1024,
    # Seconds a worker sleeps between polls when nothing is due.
    "WORKER_POLL_INTERVAL": 1.0,
    # Largest number of deliveries one worker claims at a time.
    "WORKER_BATCH_SIZE": 20,
}

ENV_PREFIX = "PLANTSTORE"


def load(app, overrides=None):
    """Fill ``app.config`` from the defaults, the environment, then overrides."""
    app.config.update(DEFAULTS)
    app.config.from_prefixed_env(ENV_PREFIX)
    if overrides:
        app.config.update(overrides)
