"""Operators' commands for deliveries: ``plantstore deliveries`` (inspect,
sum up, re-send, recover, purge); ``plantstore worker`` is ``worker.py``.

Output meant for scripts goes to stdout; failures are explained on stderr
with a non-zero exit. Every command runs inside the app's context.
"""

import click
from flask import current_app
from flask.cli import AppGroup
from marshmallow import ValidationError
from peewee import fn

from ..db.models import Delivery
from ..observability.logs import one_line
from ..web.fields import UtcTimestamp
from ..webhooks.config import settings_of
from ..webhooks.engine import backlog, retention
from ..webhooks.engine.refusals import enable_command
from ..webhooks.subscriptions import delivery_log, operations
from .params import DELIVERY_ID, LIST_LIMIT, ROW_ID, days
from .webhooks import find_delivery, find_subscription, send_now, when


def parse_since(ctx, param, text):
    """An RFC 3339 time with an offset, as naive UTC (read as the API reads
    ``since``); a usage error otherwise."""
    try:
        return UtcTimestamp().deserialize(text)
    except ValidationError as error:
        # The field's messages show a valid time, as the API's do.
        raise click.BadParameter(f"{text!r}: {' '.join(error.messages)}") from None


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
    next attempt (pending), the delivery time, or the last error (a
    receiver's text, escaped: ``one_line``)."""
    deliveries, _ = delivery_log.page(None, delivery_log.Filters(status=status), limit)
    for delivery in deliveries:
        if delivery.status == Delivery.DELIVERED:
            detail = f"delivered {when(delivery.delivered_at)}"
        elif delivery.status == Delivery.PENDING:
            detail = f"next {when(delivery.next_attempt_at)}"
            if delivery.last_error:
                detail += f"  last error: {one_line(delivery.last_error)}"
        else:
            detail = f"last error: {one_line(delivery.last_error or '-')}"
        click.echo(f"{delivery.id}\t{delivery.status}\t{delivery.subscription_id}\t"
                   f"{delivery.message_id}\t{delivery.attempts}\t{detail}")


@deliveries_cli.command("summary")
def deliveries_summary():
    """Count deliveries by state, and say how long the oldest due one (pending,
    due, held by no sender) has waited for a worker, by the database's clock."""
    counts = dict(Delivery.select(Delivery.status, fn.COUNT(Delivery.id))
                  .group_by(Delivery.status).tuples())
    for status in (Delivery.PENDING, Delivery.DELIVERED, Delivery.FAILED):
        click.echo(f"{status}\t{counts.get(status, 0)}")
    age = backlog.oldest_due_age()
    click.echo(f"oldest due age\t{age:.0f} s" + ("" if age else " (none due)"))


@deliveries_cli.command("show")
@click.argument("delivery_id", type=DELIVERY_ID)
def deliveries_show(delivery_id):
    """Show delivery DELIVERY_ID and every attempt at it (what a receiver or a
    client sent shown escaped, ``one_line``)."""
    find_delivery(delivery_id)  # a one-line error when there is none
    delivery = delivery_log.delivery_with_attempts(None, delivery_id)
    subscription = delivery.subscription
    lines = [
        f"delivery:     {delivery.id}",
        f"webhook-id:   {delivery.message_id}",
        f"event:        {delivery.event_type}",
        f"subscription: {subscription.id} {one_line(subscription.url)}",
        f"status:       {delivery.status}",
        f"created:      {when(delivery.created_at)}",
    ]
    if delivery.traceparent:  # version-traceid-spanid-flags
        lines.append(f"trace id:     {delivery.traceparent.split('-')[1]}")
    if delivery.status == Delivery.PENDING:
        lines.append(f"next attempt: {when(delivery.next_attempt_at)}")
    if delivery.delivered_at:
        lines.append(f"delivered:    {when(delivery.delivered_at)}")
    if delivery.last_error:
        lines.append(f"last error:   {one_line(delivery.last_error)}")
    lines.append(f"payload:      {one_line(delivery.payload)}")
    attempts = delivery.attempt_rows
    lines.append(f"attempts:     {len(attempts)}")
    for attempt in attempts:
        if attempt.status_code is not None:
            answer = f"HTTP {attempt.status_code}"
            if attempt.error:
                answer += f" {attempt.error}"
        else:
            answer = attempt.error or "no answer"
        lines.append(f"  {when(attempt.started_at)}\t{one_line(answer)}\t"
                     f"{attempt.duration_ms} ms")
        if attempt.response_body:
            lines.append(f"    body: {one_line(attempt.response_body)}")
    click.echo("\n".join(lines))


@deliveries_cli.command("retry")
@click.argument("delivery_id", type=DELIVERY_ID)
def deliveries_retry(delivery_id):
    """Re-send DELIVERY_ID now, with the same webhook-id.

    If this attempt fails, the delivery goes through the retry schedule again.
    """
    send_now(delivery_id)


@deliveries_cli.command("recover")
@click.option("--subscription", "subscription_id", type=ROW_ID, required=True,
              help="The subscription whose failed deliveries to send again.")
@click.option("--since", required=True, callback=parse_since, metavar="TIME",
              help="RFC 3339 time (e.g. 2026-01-31T12:00:00Z); failed deliveries "
                   "created since then are sent again.")
def deliveries_recover(subscription_id, since):
    """Queue again every failed delivery of a subscription created since TIME,
    each with its webhook-id; the workers send them."""
    try:
        queued = operations.recover(find_subscription(subscription_id), since)
    except operations.Disabled as refused:
        raise click.ClickException(refused.worded(enable_command(subscription_id))) from None
    click.echo(f"queued {queued} failed deliveries of subscription {subscription_id} again")


@deliveries_cli.command("purge")
@click.option("--older-than", "days", type=days(3650), metavar="DAYS",
              help="Age in days (default: PLANTSTORE_WEBHOOK_RETENTION_DAYS).")
def deliveries_purge(days):
    """Delete delivered and failed deliveries older than DAYS, with their
    attempts, in small batches; pending ones are never deleted."""
    days = days or settings_of(current_app).retention_days
    deleted = retention.purge(days)
    click.echo(f"deleted {deleted} deliveries older than {days} days")
