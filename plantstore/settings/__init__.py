"""Every setting of plantstore, its default, its bounds and what it is for.

This table is the one place settings are read: ``load`` fills ``app.config``
from the defaults, then ``PLANTSTORE_<KEY>`` environment variables, then the
overrides handed to ``create_app``, parsing and bounding each value. A value
that cannot be used stops the app with a ``SettingError`` naming the
variable. ``docs/settings.md`` is generated from this table (``make docs``).
"""
import dataclasses
import os

from ..encryption import parse_keys
from .values import integer, networks, number, quoted_url, rate_limits, schedule, text

ENV_PREFIX = "PLANTSTORE_"


class SettingError(ValueError):
    """A setting's value is unusable; the message names its environment variable."""


@dataclasses.dataclass(frozen=True)
class Setting:
    """One setting: config key, default, parser (raises ValueError) and help."""
    key: str
    default: object
    parse: object
    help: str

    @property
    def env_name(self):
        """The environment variable that sets it."""
        return ENV_PREFIX + self.key

    def read(self, raw):
        """``raw`` (text from the environment, or a Python value) parsed and bounded."""
        try:
            return self.parse(raw)
        except (TypeError, ValueError) as error:
            raise SettingError(f"{self.env_name} {error}") from None


HOUR, DAY = 3600, 86400

SETTINGS = (
    Setting("DATABASE_URL", "sqlite:///plantstore.db",
            text(r"\S{1,4096}", "a database URL (1 to 4096 characters, no spaces)", quoted_url),
            "Where plants live: `sqlite:///relative.db`, `sqlite:////absolute.db` or "
            "`postgresql://user:password@host:port/dbname`."),
    Setting("DATABASE_POOL_SIZE", 10, integer(1, 1000),
            "Most database connections one process keeps open: more than its "
            "gunicorn threads (8), as the webhook outcome writer needs one too."),
    Setting("SQLITE_WRITE_WAIT_SECONDS", 5.0, number(0, 30, above_minimum=True),
            "SQLite only: how long a write waits for its turn while another holds it, "
            "then answers 503 with `Retry-After`. Keep it well under nginx's "
            "`proxy_read_timeout` (35 s) and the load balancer's timeouts "
            "(docs/operating.md)."),
    Setting("LIST_LIMIT_DEFAULT", 100, integer(1, 1_000_000),
            "Page size of `GET /plants` when `limit` is absent (capped by the maximum)."),
    Setting("LIST_LIMIT_MAX", 1000, integer(1, 1_000_000),
            "Largest `limit` accepted by `GET /plants`; above it, 400."),
    Setting("MAX_CONTENT_LENGTH", 1024 * 1024, integer(1, 1024 ** 3),
            "Largest request body in bytes, chunked bodies included; above it, 413."),
    Setting("TOKEN_PREFIX", "pst_", text(r"[A-Za-z0-9_]{1,12}",
                                         "1 to 12 letters, digits or underscores"),
            "Prefix of every issued bearer token, so that leaked tokens are recognisable."),
    Setting("TRUSTED_PROXIES", 0, integer(0, 10),
            "How many proxies in front may set `X-Forwarded-*` headers; 0 trusts none."),
    Setting("WEBHOOK_CONNECT_TIMEOUT", 2.0, number(0, 60, above_minimum=True),
            "Seconds a webhook attempt may take to connect."),
    Setting("WEBHOOK_READ_TIMEOUT", 5.0, number(0, 300, above_minimum=True),
            "Seconds a webhook attempt may then take for the whole answer."),
    Setting("WEBHOOK_RETRY_SCHEDULE", "5,300,1800,7200,18000,36000,36000",
            schedule(7 * DAY, 50),
            "Seconds between retries of a failed webhook delivery (each spread by "
            "±10 %), comma-separated; after the last, the delivery fails."),
    Setting("WEBHOOK_SECRET_OVERLAP_HOURS", 24.0, number(0, 30 * 24),
            "Hours a rotated-out signing secret keeps signing beside the new one."),
    Setting("WEBHOOK_LEASE_SECONDS", 60.0, number(0, DAY, above_minimum=True),
            "Seconds a delivery stays reserved to its sender (at least twice connect + "
            "read timeout); a sender that dies leaves it to the workers after that."),
    Setting("WEBHOOK_MAX_RESPONSE_BYTES", 64 * 1024, integer(0, 16 * 1024 * 1024),
            "Most bytes of a receiver's answer that are read."),
    Setting("WEBHOOK_IDLE_CONNECTION_SECONDS", 60.0, number(1, DAY),
            "Seconds a kept-alive connection to a webhook receiver may stay idle "
            "before it is closed (within a quarter of that more)."),
    Setting("WEBHOOK_SENDS_PER_PROCESS", 8, integer(1, 256),
            "Most webhook attempts one web process makes at once right after creates; "
            "past it, new deliveries are left to the workers."),
    Setting("WEBHOOK_SENDS_PER_RECEIVER", 16, integer(1, 256),
            "Most attempts at one receiver one process (web or worker) makes at once "
            "(never more than the process's own cap)."),
    Setting("WEBHOOK_BREAKER_THRESHOLD", 5, integer(1, 1000),
            "Failures in a row (no answer in time, connection failed, or a 5xx) that "
            "open a receiver's circuit breaker."),
    Setting("WEBHOOK_BREAKER_COOLDOWN", 30.0, number(0, DAY, above_minimum=True),
            "Seconds between the single probe attempts a worker makes at a receiver "
            "whose breaker is open."),
    Setting("WEBHOOK_ALLOWED_NETWORKS", "", networks(100),
            "Networks that webhook URLs registered through the API may reach although "
            "they are not public (e.g. `10.0.0.0/8`); operators' CLI subscriptions "
            "may reach anything."),
    Setting("WEBHOOK_TRACEPARENT", "none",
            text(r"none|operator|all", "`none`, `operator` or `all`"),
            "Which webhook receivers get a W3C `traceparent` header while tracing is on "
            "(it tells them the trace's id): `none`; `operator`, those added with "
            "`plantstore webhooks add`; `all`, also those users add through the API."),
    Setting("WEBHOOK_MAX_PER_USER", 10, integer(1, 1000),
            "Most webhook subscriptions one user may hold through the API."),
    Setting("WEBHOOK_DISABLE_AFTER_HOURS", 120.0, number(0, 365 * 24, above_minimum=True),
            "Hours without a successful delivery, while deliveries keep failing, after "
            "which a webhook subscription is disabled."),
    Setting("WEBHOOK_RETENTION_DAYS", 30, integer(1, 3650),
            "Days delivered and failed webhook deliveries (with their attempts) are "
            "kept; the worker deletes older ones. Pending ones are never deleted."),
    Setting("WEBHOOK_BACKLOG_WARN_SECONDS", 300.0, number(0, 7 * DAY, above_minimum=True),
            "Seconds the oldest due webhook delivery may wait for a worker before a web "
            "process that leaves deliveries to the workers warns in its log (at most "
            "once a minute): no worker is running, or none keeps up."),
    Setting("WORKER_POLL_INTERVAL", 1.0, number(0, HOUR, above_minimum=True),
            "Most seconds a webhook worker sleeps between polls when nothing is due (a "
            "random 75-100 % of it, so workers started together do not poll in step)."),
    Setting("WORKER_CLAIM_COOLDOWN", 0.015, number(0, 10),
            "Least seconds between two claims of one webhook worker, unless twice "
            "a receiver's cap of attempts ended since: the room freed meanwhile is "
            "filled by the next claim together (0: claim as each frees)."),
    Setting("WORKER_BATCH_SIZE", 50, integer(1, 1000),
            "Most deliveries one webhook worker claims at once."),
    Setting("WORKER_THREADS", 32, integer(1, 256),
            "Attempts one webhook worker makes at once, shared fairly between "
            "receivers and their owners."),
    Setting("RATE_LIMIT", "", rate_limits,
            "Requests one caller (a token's user; a client address without a valid "
            "token) may make to the API, in Flask-Limiter's notation; empty: no limit."),
    Setting("RATE_LIMIT_STORAGE_URI", "memory://",
            text(r"memory://|(redis|rediss|redis\+unix)://\S+",
                 "`memory://` or a `redis://host:port/db` URL", quoted_url),
            "Where rate limit counts live: `memory://` counts per process; "
            "`redis://host:port/db` shares them between every process and machine."),
    Setting("RATE_LIMIT_REDIS_TIMEOUT", 0.05, number(0, 5, above_minimum=True),
            "Seconds a request waits for Redis (to connect, then for each answer) "
            "before it is served without a limit."),
    Setting("RATE_LIMIT_FAIL_OPEN_SECONDS", 5.0, number(0, HOUR, above_minimum=True),
            "Seconds a process serves requests without a limit, without asking Redis, "
            "after Redis failed to answer; then one request asks again."),
    Setting("LOG_FORMAT", "auto", text(r"auto|text|json", "`auto`, `text` or `json`"),
            "Log lines: `json` (one object per line), `text` (for a person), or `auto`: "
            "text when stderr is a terminal, JSON otherwise."),
    Setting("ENCRYPTION_KEYS", "", parse_keys,
            "Keys from `plantstore keys generate`, comma-separated, that encrypt webhook "
            "signing secrets and bearer tokens at rest: the first encrypts, all decrypt "
            "(rotation: docs/operating.md). Empty: they are stored in plain text."),
    Setting("PORTAL_URL", "",
            text(r"|https?://[^\s/?#]+(/[^\s?#]*[^\s?#/])?",
                 "empty, or an http:// or https:// URL without a query, fragment or "
                 "trailing slash"),
            "The public base URL the portal's links are built from (e.g. "
            "`https://plants.example.com`; links are `<it>/portal/enter/<key>`), never "
            "the request's `Host`. Empty: the portal is off (docs/portal.md)."),
    Setting("PORTAL_SECRET_KEY", "", text(r"|\S{32,512}", "empty, or 32 to 512 "
                                                          "characters without spaces"),
            "Signs the portal's CSRF tokens; the same on every web process. Empty: "
            "derived from the first key of `PLANTSTORE_ENCRYPTION_KEYS` (one of the two "
            "is needed while the portal is on)."),
    Setting("PORTAL_IDLE_MINUTES", 30, integer(1, 24 * 60),
            "Minutes a portal session lasts without a request, then ends."),
    Setting("PORTAL_SESSION_HOURS", 12, integer(1, 7 * 24),
            "Hours a portal session lasts at most, however busy."),
    Setting("PORTAL_FRAME_ANCESTORS", "'none'",
            text(r"'none'|('self'|https://[^\s;,']+)( ('self'|https://[^\s;,']+)){0,19}",
                 "`'none'`, or up to 20 of `'self'` and `https://` origins, space-separated"),
            "Who may show the portal in a frame: the Content-Security-Policy's "
            "`frame-ancestors` (`'none'`: nobody)."),
    Setting("IDEMPOTENCY_TTL_HOURS", 24.0, number(0, 30 * 24, above_minimum=True),
            "Hours an `Idempotency-Key` of `POST /plants` is remembered with its answer."),
)


def read(environ=None, overrides=None):
    """Every setting's value: defaults, then ``environ``, then ``overrides``.

    Keys of ``overrides`` that are not settings (Flask's ``TESTING``, ...)
    are passed through as they are.
    """
    environ = os.environ if environ is None else environ
    overrides = dict(overrides or {})
    values = {}
    for setting in SETTINGS:
        if setting.key in overrides:
            raw = overrides.pop(setting.key)
        else:
            raw = environ.get(setting.env_name, setting.default)
        values[setting.key] = setting.read(raw)
    if values["LIST_LIMIT_DEFAULT"] > values["LIST_LIMIT_MAX"]:
        values["LIST_LIMIT_DEFAULT"] = values["LIST_LIMIT_MAX"]
    if values["PORTAL_URL"] and not (values["PORTAL_SECRET_KEY"] or values["ENCRYPTION_KEYS"]):
        raise SettingError(f"{ENV_PREFIX}PORTAL_URL needs {ENV_PREFIX}PORTAL_SECRET_KEY or "
                           f"{ENV_PREFIX}ENCRYPTION_KEYS (the portal signs its forms' "
                           "CSRF tokens with one of them)")
    values.update(overrides)
    return values


def load(app, overrides=None):
    """Fill ``app.config`` with every setting (``SettingError`` if one is unusable)."""
    app.config.update(read(overrides=overrides))


def reference():
    """The settings as a Markdown table (the text of ``docs/settings.md``)."""
    lines = ["# Settings", "",
             "Generated from `plantstore/settings.py` by `make docs`;",
             "a test keeps the two equal. Set each in the environment of the web",
             "processes and the workers alike (`config/plantstore.env.example`).", "",
             "| variable | default | allowed | what it is for |",
             "|---|---|---|---|"]
    for setting in SETTINGS:
        default = f"`{setting.default}`" if setting.default != "" else "(empty)"
        lines.append(f"| `{setting.env_name}` | {default} | "
                     f"{setting.parse.allowed} | {setting.help} |")
    return "\n".join(lines) + "\n"
