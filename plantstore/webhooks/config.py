"""Webhook delivery settings, read once from the app's configuration.

Sending happens in threads that have no app context, so everything a send or
an outcome needs is parsed here into one immutable ``WebhookSettings`` kept in
``app.extensions``. A malformed value fails the app's start with a message
that names the key.
"""
import dataclasses

EXTENSION_KEY = "plantstore.webhooks"


class WebhookConfigError(ValueError):
    """A ``PLANTSTORE_WEBHOOK_*`` or ``PLANTSTORE_WORKER_*`` value is unusable;
    the message names the environment variable."""


@dataclasses.dataclass(frozen=True)
class WebhookSettings:
    """Timeouts, retry schedule, leases and limits of webhook delivery."""
    connect_timeout: float
    read_timeout: float
    retry_schedule: tuple
    max_response_bytes: int
    lease_seconds: float
    secret_overlap_hours: float
    poll_interval: float
    batch_size: int
    user_agent: str

    @property
    def send_bound(self):
        """The longest one attempt may take: connect plus read timeout."""
        return self.connect_timeout + self.read_timeout

    @property
    def longest_delay(self):
        """The largest step of the schedule: the cap on a Retry-After."""
        return max(self.retry_schedule, default=0.0)


def parse_schedule(value):
    """Seconds between retries from ``5,300,1800``, a number, or a list.

    The environment hands over ``PLANTSTORE_WEBHOOK_RETRY_SCHEDULE=5`` as the
    int 5 and ``5,300`` as a string, so every shape is accepted. An empty
    value means no retry at all.
    """
    if isinstance(value, bool):
        raise WebhookConfigError("PLANTSTORE_WEBHOOK_RETRY_SCHEDULE must be seconds, "
                                 f"comma-separated, not {value!r}")
    if isinstance(value, (int, float)):
        items = [value]
    elif isinstance(value, str):
        items = [part.strip() for part in value.strip().strip("[]").split(",")
                 if part.strip()]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise WebhookConfigError(
            f"PLANTSTORE_WEBHOOK_RETRY_SCHEDULE: unusable value {value!r}")
    try:
        delays = tuple(float(item) for item in items)
    except (TypeError, ValueError):
        raise WebhookConfigError(
            f"PLANTSTORE_WEBHOOK_RETRY_SCHEDULE must be seconds, comma-separated "
            f"(e.g. 5,300,1800), not {value!r}") from None
    if any(delay < 0 or delay != delay for delay in delays):
        raise WebhookConfigError(
            f"PLANTSTORE_WEBHOOK_RETRY_SCHEDULE has a negative delay: {value!r}")
    return delays


def _number(config, key, kind=float, minimum=0.0, exclusive=False):
    """``config[key]`` as a number of ``kind`` at least (or above) ``minimum``."""
    raw = config[key]
    try:
        if isinstance(raw, bool):
            raise ValueError
        value = kind(raw)
    except (TypeError, ValueError):
        raise WebhookConfigError(
            f"PLANTSTORE_{key} must be a number, not {raw!r}") from None
    if value < minimum or (exclusive and value == minimum):
        bound = "above" if exclusive else "at least"
        raise WebhookConfigError(f"PLANTSTORE_{key} must be {bound} {minimum}, not {raw!r}")
    return value


def from_config(config, version):
    """Build the settings from a Flask config mapping."""
    connect = _number(config, "WEBHOOK_CONNECT_TIMEOUT", minimum=0, exclusive=True)
    read = _number(config, "WEBHOOK_READ_TIMEOUT", minimum=0, exclusive=True)
    # A lease shorter than an attempt could let a second sender start while
    # the first is still waiting for the receiver.
    lease = max(_number(config, "WEBHOOK_LEASE_SECONDS", minimum=0, exclusive=True),
                2 * (connect + read))
    return WebhookSettings(
        connect_timeout=connect,
        read_timeout=read,
        retry_schedule=parse_schedule(config["WEBHOOK_RETRY_SCHEDULE"]),
        max_response_bytes=_number(config, "WEBHOOK_MAX_RESPONSE_BYTES", int),
        lease_seconds=lease,
        secret_overlap_hours=_number(config, "WEBHOOK_SECRET_OVERLAP_HOURS"),
        poll_interval=_number(config, "WORKER_POLL_INTERVAL", minimum=0, exclusive=True),
        batch_size=_number(config, "WORKER_BATCH_SIZE", int, minimum=1),
        user_agent=f"plantstore/{version}",
    )


def init_app(app):
    """Parse the webhook settings of ``app`` (fails fast when malformed)."""
    from .. import __version__
    app.extensions[EXTENSION_KEY] = from_config(app.config, __version__)


def settings_of(app):
    """The parsed webhook settings of ``app``."""
    return app.extensions[EXTENSION_KEY]
