"""Operators' commands for webhook receivers: ``plantstore webhooks``, and
the helpers the delivery commands (``deliveries.py``) share.

Output meant for scripts goes to stdout (``webhooks add`` prints one JSON
object); failures are explained on stderr with a non-zero exit. Every
command runs inside the app's context (``AppGroup``), as it needs the app's
webhook settings.
"""
import json
import threading

import click
from flask import current_app
from flask.cli import AppGroup

from ..db import clock
from ..db.models import Delivery, Subscription
from ..observability.logs import one_line
from ..webhooks.config import settings_of
from ..webhooks.engine import queue, throttle
from ..webhooks.engine.refusals import disabled_refusal, enable_command
from ..webhooks.receivers import registration
from ..webhooks.receivers import secrets as receiver_secrets
from ..webhooks.sending.attempt import attempt_and_put
from ..webhooks.subscriptions import secrets
from ..webhooks.subscriptions import store as subscription_store
from .params import ROW_ID

TIME = "%Y-%m-%d %H:%M:%S"


def when(moment):
    """A stored UTC time for humans, or a dash."""
    return f"{moment:{TIME}}" if moment else "-"


def validate_url(ctx, param, url):
    """The URL if a receiver may have it (``registration.url_problem``, as the
    API checks); a usage error otherwise."""
    problem = registration.url_problem(url)
    if problem:
        raise click.BadParameter(problem)
    return url


def validate_bearer(ctx, param, token):
    """The token if it can be sent to a receiver (``registration.bearer_problem``,
    as the API checks); a usage error otherwise."""
    if token is None:
        return None
    problem = registration.bearer_problem(token)
    if problem:
        raise click.BadParameter(problem)
    return token


def find_subscription(subscription_id):
    """The subscription with that id, or a one-line error."""
    subscription = Subscription.get_or_none(Subscription.id == subscription_id)
    if subscription is None:
        raise click.ClickException(f"no webhook subscription with id {subscription_id}")
    return subscription


def find_delivery(delivery_id):
    """The delivery with that id, or a one-line error."""
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
@click.option("--rate-limit", "rate_limit", metavar="N",
              type=click.IntRange(1, registration.RATE_LIMIT_MAX),
              help="Send the receiver at most N deliveries a second (default: no limit).")
def webhooks_add(url, bearer, rate_limit):
    """Send every new plant to URL; prints {"id", "url", "secret"} as JSON.

    The signing secret is shown only this once.
    """
    subscription, secret = subscription_store.add(None, url, bearer or None, rate_limit)
    click.echo(json.dumps({"id": subscription.id, "url": url, "secret": secret}))


@webhooks_cli.command("list")
def webhooks_list():
    """List receivers: id, url, owner, state, bearer, rate limit, secret
    rotation (never secrets), circuit breaker."""
    now = clock.read()  # as the housekeeping judges the overlaps' ends
    for subscription in Subscription.select().order_by(Subscription.id):
        state = ("active" if subscription.is_active
                 else f"disabled ({one_line(subscription.disabled_reason or 'by an operator')})")
        retired = receiver_secrets.retired(subscription, now)
        rotation = (f"{len(retired)} previous secret(s) sign until "
                    f"{when(max(until for _, until in retired))}"
                    if retired else "one secret")
        owner = subscription.owner.name if subscription.owner_id else "operator"
        bearer = "bearer token" if subscription.bearer_token else "no bearer token"
        limit = (f"at most {subscription.rate_limit}/s" if subscription.rate_limit
                 else "no rate limit")
        click.echo(f"{subscription.id}\t{one_line(subscription.url)}\t{owner}\t{state}\t"
                   f"{bearer}\t{limit}\t{rotation}\t{_breaker_state(subscription)}")


def _breaker_state(subscription):
    """The circuit breaker of a subscription, for ``webhooks list``."""
    failures = subscription.failure_streak
    if subscription.breaker_opened_at is not None:
        return (f"breaker open since {when(subscription.breaker_opened_at)} "
                f"({failures} failures in a row; next probe "
                f"{when(subscription.breaker_probe_at)})")
    if failures:
        return f"breaker closed ({failures} failures in a row)"
    return "breaker closed"


@webhooks_cli.command("remove")
@click.argument("subscription_id", type=ROW_ID)
def webhooks_remove(subscription_id):
    """Delete receiver SUBSCRIPTION_ID with its deliveries."""
    queue.delete_subscription(find_subscription(subscription_id).id)
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
    find_subscription(subscription_id)
    hours = settings_of(current_app).secret_overlap_hours
    rotation = secrets.rotate(subscription_id, hours)
    if rotation is None:
        raise click.ClickException(f"no webhook subscription with id {subscription_id}")
    click.echo(rotation.secret)
    click.echo(f"the previous secret also signs until {when(rotation.previous_expires_at)} "
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
    find_subscription(subscription_id)
    queue.enable(subscription_id)
    click.echo(f"enabled webhook subscription {subscription_id}")


@webhooks_cli.command("test")
@click.argument("subscription_id", type=ROW_ID)
def webhooks_test(subscription_id):
    """Send SUBSCRIPTION_ID a signed example New Plant event now.

    It is recorded as a delivery (event plant.test); if this attempt fails,
    it is retried like any other.
    """
    subscription = find_subscription(subscription_id)
    if not subscription.is_active:
        raise click.ClickException(
            disabled_refusal(subscription, enable_command(subscription_id)))
    delivery = queue.enqueue_test_event(subscription_id)
    send_now(delivery.id, failed="failed")


class WrittenAtOnce:
    """``attempt_and_put``'s writer for one command's attempt: its outcome
    written at once (no batching: nothing else waits), or its job given back."""

    def __init__(self, settings):
        self.settings = settings
        self.given_back = False

    def put(self, job, result):
        queue.record([(job, result)], self.settings)
        written = threading.Event()
        written.set()
        return written

    def give_back(self, job):
        queue.give_back([job])
        self.given_back = True


def send_now(delivery_id, failed="failed again"):
    """Attempt a delivery now, as every send is (``attempt_and_put``: checked
    against its subscription as it is now), and say how it went (exit 1 if
    it failed or was not sent)."""
    settings = settings_of(current_app)
    try:
        job = queue.take_for_resend(delivery_id, settings)
    except queue.ResendRefused as refused:
        raise click.ClickException(str(refused)) from None
    if not throttle.admits(job, lambda job: queue.give_back([job])):
        click.echo(f"delivery {delivery_id} waits for its receiver's rate limit; "
                   "the workers send it")
        return
    writer = WrittenAtOnce(settings)
    delivered = attempt_and_put(job, settings, writer, token_taken=True)
    delivery = find_delivery(delivery_id)
    if delivered:
        click.echo(f"delivered {delivery.message_id}")
        return
    if writer.given_back:
        raise click.ClickException(
            f"delivery {delivery_id} not sent: its subscription changed meanwhile or this "
            f"process cannot send it (see the log); it is {delivery.status}")
    if delivery.status == Delivery.PENDING:
        state = f"will retry at {when(delivery.next_attempt_at)} UTC"
    else:
        state = delivery.status
    raise click.ClickException(
        f"delivery {delivery_id} {failed} ({one_line(delivery.last_error or '-')}); {state}")
