"""Webhook delivery settings, gathered once per app for threads without an app context.

Sending happens in threads that have no app context, so everything a send or
an outcome needs is taken from the app's (already parsed and bounded)
configuration into one immutable ``WebhookSettings``, kept in
``app.extensions`` beside the app's ``WebSender`` (the sender threads that
attempt deliveries right after creates).
"""
import dataclasses

EXTENSION_KEY = "plantstore.webhooks"
SENDER_KEY = "plantstore.webhooks.sending.web_sender"


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
    worker_threads: int
    sends_per_process: int
    sends_per_receiver: int
    breaker_threshold: int
    breaker_cooldown: float
    user_agent: str
    allowed_networks: tuple = ()  # what API subscriptions may reach beyond public addresses
    disable_after_hours: float = 120.0
    retention_days: int = 30
    traceparent_receivers: str = "none"  # who gets a traceparent header (see tracing)
    claim_cooldown: float = 0.015  # least seconds between a worker's claims
    idle_connection_seconds: float = 60.0  # a kept-alive connection idle longer is closed

    @property
    def send_bound(self):
        """The hard deadline of one attempt: connect plus read timeout."""
        return self.connect_timeout + self.read_timeout

    @property
    def longest_delay(self):
        """The largest step of the schedule: the cap on a Retry-After."""
        return max(self.retry_schedule, default=0.0)


def from_config(config):
    """The webhook settings of ``config``, every setting's value (``plantstore.settings``)."""
    from .. import __version__
    connect, read = config["WEBHOOK_CONNECT_TIMEOUT"], config["WEBHOOK_READ_TIMEOUT"]
    return WebhookSettings(
        connect_timeout=connect,
        read_timeout=read,
        retry_schedule=config["WEBHOOK_RETRY_SCHEDULE"],
        max_response_bytes=config["WEBHOOK_MAX_RESPONSE_BYTES"],
        # A lease must outlast an attempt with room to spare (an attempt
        # starts only while its lease has its deadline and a margin left).
        lease_seconds=max(config["WEBHOOK_LEASE_SECONDS"], 2 * (connect + read) + 1),
        secret_overlap_hours=config["WEBHOOK_SECRET_OVERLAP_HOURS"],
        poll_interval=config["WORKER_POLL_INTERVAL"],
        batch_size=config["WORKER_BATCH_SIZE"],
        worker_threads=config["WORKER_THREADS"],
        sends_per_process=config["WEBHOOK_SENDS_PER_PROCESS"],
        sends_per_receiver=config["WEBHOOK_SENDS_PER_RECEIVER"],
        breaker_threshold=config["WEBHOOK_BREAKER_THRESHOLD"],
        breaker_cooldown=config["WEBHOOK_BREAKER_COOLDOWN"],
        user_agent=f"plantstore/{__version__}",
        allowed_networks=config["WEBHOOK_ALLOWED_NETWORKS"],
        disable_after_hours=config["WEBHOOK_DISABLE_AFTER_HOURS"],
        retention_days=config["WEBHOOK_RETENTION_DAYS"],
        traceparent_receivers=config["WEBHOOK_TRACEPARENT"],
        claim_cooldown=config["WORKER_CLAIM_COOLDOWN"],
        idle_connection_seconds=config["WEBHOOK_IDLE_CONNECTION_SECONDS"],
    )


def init_app(app):
    """Gather the webhook settings of ``app`` and make its web sender (whose
    threads start with the first attempt)."""
    from .sending.web_sender import WebSender
    settings = app.extensions[EXTENSION_KEY] = from_config(app.config)
    app.extensions[SENDER_KEY] = WebSender(settings)


def settings_of(app):
    """The webhook settings of ``app``."""
    return app.extensions[EXTENSION_KEY]


def web_sender_of(app):
    """The web sender of ``app``'s process."""
    return app.extensions[SENDER_KEY]
