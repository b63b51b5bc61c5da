"""Operators' commands for webhooks: ``plantstore webhooks``, ``deliveries``
and ``worker``.

Output meant for scripts goes to stdout (``webhooks add`` prints one JSON
object); failures are explained on stderr with a non-zero exit. Every
command runs inside the app's context (``AppGroup``, ``with_appcontext``), as
it needs the app's webhook settings.
"""
import datetime
import json
import signal
from urllib.parse import urlsplit

import click
from flask import current_app
from flask.cli import AppGroup, with_appcontext

from ..cli_params import LIST_LIMIT, ROW_ID
from ..db import database
from ..models import Attempt, Delivery, Subscription, utcnow
from . import dispatch, lifecycle, secrets, signing
from .breaker import is_open
from .config import settings_of
from .worker import ClaimRefused, Worker, claim_for_retry

TIME = "%Y-%m-%d %H:%M:%S"


def _when(moment):
    """A stored UTC time for humans, or a dash."""
    return f"{moment:{TIME}}" if moment else "-"


URL_MAX_LENGTH = 2048
BEARER_MAX_LENGTH = 4096


def validate_url(ctx, param, url):
    """The URL if it is an absolute http(s) URL with a host; a usage error otherwise."""
    if not 1 <= len(url) <= URL_MAX_LENGTH or not _is_visible_text(url):
        raise click.BadParameter(
            f"a webhook URL is 1 to {URL_MAX_LENGTH} characters, with no spaces, "
            "line breaks or control characters (percent-encode them)")
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 -- raises ValueError on a malformed port
    except ValueError as error:
        raise click.BadParameter(f"{url!r} is not a valid URL ({error})") from None
    if parts.scheme not in ("http", "https"):
        raise click.BadParameter(
            f"{url!r} is not an http:// or https:// URL; webhooks are sent "
            "only over HTTP(S)")
    if not host:
        raise click.BadParameter(f"{url!r} names no host")
    if parts.username is not None or parts.password is not None:
        raise click.BadParameter(
            "credentials in the URL would be sent instead of the bearer token "
            "and shown by `webhooks list`; pass a token with --bearer")
    return url


def parse_since(ctx, param, text):
    """An RFC 3339 time with an offset, as naive UTC; a usage error otherwise."""
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise click.BadParameter(
            f"{text!r} is not an RFC 3339 time with an offset, e.g. 2026-01-31T12:00:00Z")
    return moment.astimezone(datetime.timezone.utc).replace(tzinfo=None)


def validate_bearer(ctx, param, token):
    """The token if it can be sent in an ``Authorization`` header; a usage error otherwise."""
    if token is None:
        return None
    if not 1 <= len(token) <= BEARER_MAX_LENGTH or not token.isascii() \
            or not _is_visible_text(token):
        raise click.BadParameter(
            f"a bearer token is 1 to {BEARER_MAX_LENGTH} visible ASCII characters "
            "(no spaces, line breaks or control characters)")
    return token


def _is_visible_text(text):
    """True when ``text`` has no whitespace and no control characters."""
    return text.isprintable() and not any(char.isspace() for char in text)


def _subscription(subscription_id):
    subscription = Subscription.get_or_none(Subscription.id == subscription_id)
    if subscription is None:
        raise click.ClickException(f"no webhook subscription with id {subscription_id}")
    return subscription


def _delivery(delivery_id):
    delivery = Delivery.get_or_none(Delivery.id == delivery_id)
    if delivery is None:
        raise click.ClickException(f"no delivery with id {delivery_id}")
    return delivery


@click.group("webhooks", cls=AppGroup)
def webhooks_cli():
    """Register and manage "New Plant" webhook receivers."""


@webhooks_cli.command("add")
@click.argument("url", callback=validate_url)
@click.option("--bearer", metavar="TOKEN", callback=validate_bearer,
              help="Sent to the receiver as `Authorization: Bearer TOKEN`.")
def webhooks_add(url, bearer):
    """Send every new plant to URL; prints {"id", "url", "secret"} as JSON.

    The signing secret is shown only this once.
    """
    secret = signing.new_secret()
    with database.atomic():
        subscription = Subscription.create(url=url, bearer_token=bearer or None,
                                           secret=secret)
    click.echo(json.dumps({"id": subscription.id, "url": url, "secret": secret}))


@webhooks_cli.command("list")
def webhooks_list():
    """List receivers: id, url, owner, state, bearer, secret rotation (never
    secrets), circuit breaker."""
    now = utcnow()
    for subscription in Subscription.select().order_by(Subscription.id):
        state = ("active" if subscription.is_active
                 else f"disabled ({subscription.disabled_reason or 'by an operator'})")
        retired = secrets.retired(subscription, now)
        rotation = (f"{len(retired)} previous secret(s) sign until "
                    f"{_when(max(until for _, until in retired))}"
                    if retired else "one secret")
        owner = subscription.owner.name if subscription.owner_id else "operator"
        bearer = "bearer token" if subscription.bearer_token else "no bearer token"
        click.echo(f"{subscription.id}\t{subscription.url}\t{owner}\t{state}\t"
                   f"{bearer}\t{rotation}\t{_breaker_state(subscription)}")


def _breaker_state(subscription):
    """The circuit breaker of a subscription, for ``webhooks list``."""
    failures = subscription.failure_streak
    if is_open(subscription):
        return (f"breaker open since {_when(subscription.breaker_opened_at)} "
                f"({failures} failures in a row; next probe "
                f"{_when(subscription.breaker_probe_at)})")
    if failures:
        return f"breaker closed ({failures} failures in a row)"
    return "breaker closed"


@webhooks_cli.command("remove")
@click.argument("subscription_id", type=ROW_ID)
def webhooks_remove(subscription_id):
    """Delete receiver SUBSCRIPTION_ID with its deliveries."""
    subscription = _subscription(subscription_id)
    with database.atomic():
        subscription.delete_instance(recursive=True)
    click.echo(f"removed webhook subscription {subscription_id}")


@webhooks_cli.command("rotate-secret")
@click.argument("subscription_id", type=ROW_ID)
def webhooks_rotate_secret(subscription_id):
    """Give SUBSCRIPTION_ID a new signing secret and print it.

    Every secret rotated out keeps signing too (one more signature) until
    its own PLANTSTORE_WEBHOOK_SECRET_OVERLAP_HOURS end, so the receiver can
    switch over; at most 4 rotated-out secrets sign at once, and a rotation
    beyond that drops the one that would stop first.
    """
    _subscription(subscription_id)
    hours = settings_of(current_app).secret_overlap_hours
    rotation = secrets.rotate(subscription_id, hours)
    if rotation is None:
        raise click.ClickException(f"no webhook subscription with id {subscription_id}")
    click.echo(rotation.secret)
    click.echo(f"the previous secret also signs until {_when(rotation.previous_expires_at)} "
               f"UTC ({hours:g} h)", err=True)
    if rotation.dropped:
        click.echo(f"{rotation.dropped} older secret(s) stopped signing early: at most "
                   f"{secrets.MAX_RETIRED_SECRETS} rotated-out secrets sign at once",
                   err=True)


@webhooks_cli.command("enable")
@click.argument("subscription_id", type=ROW_ID)
def webhooks_enable(subscription_id):
    """Send to SUBSCRIPTION_ID again after it was disabled (by a 410 or by
    sustained failure).

    Deliveries failed meanwhile stay failed; re-send them with
    `plantstore deliveries recover --subscription ID --since TIME`.
    """
    _subscription(subscription_id)
    lifecycle.enable(subscription_id)
    click.echo(f"enabled webhook subscription {subscription_id}")


@webhooks_cli.command("test")
@click.argument("subscription_id", type=ROW_ID)
def webhooks_test(subscription_id):
    """Send SUBSCRIPTION_ID a signed example New Plant event now.

    It is recorded as a delivery (event plant.test); if this attempt fails,
    it is retried like any other.
    """
    subscription = _subscription(subscription_id)
    if not subscription.is_active:
        raise click.ClickException(
            f"subscription {subscription_id} is disabled "
            f"({subscription.disabled_reason or 'no reason recorded'}); enable it first")
    delivery = lifecycle.queue_test_event(subscription_id)
    _send_now(delivery.id, failed="failed")


@click.group("deliveries", cls=AppGroup)
def deliveries_cli():
    """Inspect and re-send webhook deliveries."""


@deliveries_cli.command("list")
@click.option("--status", type=click.Choice([Delivery.PENDING, Delivery.FAILED,
                                             Delivery.DELIVERED]),
              help="Only deliveries in this state.")
@click.option("--limit", type=LIST_LIMIT, default=100, show_default=True,
              help="Show at most this many, newest first.")
def deliveries_list(status, limit):
    """List deliveries: id, state, subscription, webhook-id, attempts, then the
    next attempt (pending), the delivery time, or the last error."""
    query = Delivery.select().order_by(Delivery.id.desc()).limit(limit)
    if status:
        query = query.where(Delivery.status == status)
    for delivery in query:
        if delivery.status == Delivery.DELIVERED:
            detail = f"delivered {_when(delivery.delivered_at)}"
        elif delivery.status == Delivery.PENDING:
            detail = f"next {_when(delivery.next_attempt_at)}"
            if delivery.last_error:
                detail += f"  last error: {delivery.last_error}"
        else:
            detail = f"last error: {delivery.last_error or '-'}"
        click.echo(f"{delivery.id}\t{delivery.status}\t{delivery.subscription_id}\t"
                   f"{delivery.message_id}\t{delivery.attempts}\t{detail}")


@deliveries_cli.command("show")
@click.argument("delivery_id", type=ROW_ID)
def deliveries_show(delivery_id):
    """Show delivery DELIVERY_ID and every attempt at it."""
    delivery = _delivery(delivery_id)
    subscription = delivery.subscription
    lines = [
        f"delivery:     {delivery.id}",
        f"webhook-id:   {delivery.message_id}",
        f"event:        {delivery.event_type}",
        f"subscription: {subscription.id} {subscription.url}",
        f"status:       {delivery.status}",
        f"created:      {_when(delivery.created_at)}",
    ]
    if delivery.status == Delivery.PENDING:
        lines.append(f"next attempt: {_when(delivery.next_attempt_at)}")
    if delivery.delivered_at:
        lines.append(f"delivered:    {_when(delivery.delivered_at)}")
    if delivery.last_error:
        lines.append(f"last error:   {delivery.last_error}")
    lines.append(f"payload:      {delivery.payload}")
    attempts = list(Attempt.select().where(Attempt.delivery == delivery.id)
                    .order_by(Attempt.started_at, Attempt.id))
    lines.append(f"attempts:     {len(attempts)}")
    for attempt in attempts:
        if attempt.status_code is not None:
            answer = f"HTTP {attempt.status_code}"
            if attempt.error:
                answer += f" {attempt.error}"
        else:
            answer = attempt.error or "no answer"
        lines.append(f"  {_when(attempt.started_at)}\t{answer}\t{attempt.duration_ms} ms")
    click.echo("\n".join(lines))


def _send_now(delivery_id, failed="failed again"):
    """Attempt a delivery now and say how it went (exit 1 if it failed)."""
    settings = settings_of(current_app)
    try:
        job = claim_for_retry(delivery_id, settings)
    except ClaimRefused as refused:
        raise click.ClickException(str(refused)) from None
    outcome = dispatch.deliver_now(job, settings)
    delivery = _delivery(delivery_id)
    if outcome == "delivered":
        click.echo(f"delivered {delivery.message_id}")
        return
    if delivery.status == Delivery.PENDING:
        state = f"will retry at {_when(delivery.next_attempt_at)} UTC"
    else:
        state = delivery.status
    raise click.ClickException(
        f"delivery {delivery_id} {failed} ({delivery.last_error}); {state}")


@deliveries_cli.command("retry")
@click.argument("delivery_id", type=ROW_ID)
def deliveries_retry(delivery_id):
    """Re-send DELIVERY_ID now, with the same webhook-id.

    If this attempt fails, the delivery goes through the retry schedule again.
    """
    _send_now(delivery_id)


@deliveries_cli.command("recover")
@click.option("--subscription", "subscription_id", type=ROW_ID, required=True,
              help="The subscription whose failed deliveries to send again.")
@click.option("--since", required=True, callback=parse_since, metavar="TIME",
              help="RFC 3339 time (e.g. 2026-01-31T12:00:00Z); failed deliveries "
                   "created since then are sent again.")
def deliveries_recover(subscription_id, since):
    """Queue again every failed delivery of a subscription created since TIME,
    each with its webhook-id; the workers send them."""
    subscription = _subscription(subscription_id)
    if not subscription.is_active:
        raise click.ClickException(
            f"subscription {subscription_id} is disabled; enable it first with "
            f"`plantstore webhooks enable {subscription_id}`")
    queued = lifecycle.recover(subscription_id, since)
    click.echo(f"queued {queued} failed deliveries of subscription {subscription_id} again")


@deliveries_cli.command("purge")
@click.option("--older-than", "days", type=click.IntRange(1, 3650), metavar="DAYS",
              help="Age in days (default: PLANTSTORE_WEBHOOK_RETENTION_DAYS).")
def deliveries_purge(days):
    """Delete delivered and failed deliveries older than DAYS, with their
    attempts, in small batches; pending ones are never deleted."""
    days = days or settings_of(current_app).retention_days
    deleted = lifecycle.purge(days)
    click.echo(f"deleted {deleted} deliveries older than {days} days")


@click.command("worker")
@with_appcontext
@click.option("--once", is_flag=True,
              help="Deliver what is due now, then exit (for cron or tests).")
def worker_cli(once):
    """Deliver due webhook deliveries: forever, or just once.

    Stops on SIGTERM or SIGINT within one attempt's deadline (connect + read
    timeout): no new attempts start, those under way end and are recorded.
    Several workers may run at once against the same database.
    """
    worker = Worker(settings_of(current_app))
    if once:
        tally = worker.run_once()
        click.echo(", ".join(f"{kind} {count}" for kind, count in sorted(tally.items()))
                   or "nothing due")
        return
    previous = {sig: signal.signal(sig, lambda *_: worker.stop())
                for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        worker.run_forever()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


COMMANDS = (webhooks_cli, deliveries_cli, worker_cli)
"""The command groups ``plantstore.cli.register_commands`` attaches."""
