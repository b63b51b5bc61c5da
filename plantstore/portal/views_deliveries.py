"""The Deliveries pages: one log across the session's endpoints, a
delivery with every attempt, resending one, recovering what failed."""
import datetime
import re

from flask import redirect, request, url_for

from ..db.models import Delivery
from ..webhooks.subscriptions import delivery_log, operations
from ..webhooks.subscriptions.schemas import DELIVERY_ID_MAX
from .blueprint import bp, caller, page
from .views_endpoints import ID, _own

PAGE_SIZE = 25
STATUSES = (Delivery.PENDING, Delivery.DELIVERED, Delivery.FAILED)
DELIVERY_ID = f"<int(min=1, max={DELIVERY_ID_MAX}):delivery_id>"
TIME_FORMATS = ("%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d")
NUMBER = re.compile(r"[0-9]{1,18}")
FILTER_PARAMETERS = ("endpoint_id", "status", "from", "to")
"""The log's filters, as the query string names them (``before`` pages)."""


def _time(text, name, problems):
    """A UTC time typed in a form (``datetime-local``, or a date), or None."""
    text = text.strip()
    if not text:
        return None
    for layout in TIME_FORMATS:
        try:
            return datetime.datetime.strptime(text, layout)
        except ValueError:
            continue
    problems[name] = "Type a UTC time as 2026-01-31T09:00, or a date as 2026-01-31."
    return None


def _number(text, name, problems):
    text = text.strip()
    if not text:
        return None
    if NUMBER.fullmatch(text) and int(text) >= 1:
        return int(text)
    problems[name] = "Pick one from the list."
    return None


def _filters(args, endpoint_ids):
    """(``delivery_log.Filters``, problems by field) from the query string."""
    problems = {}
    endpoint = _number(args.get("endpoint_id", ""), "endpoint", problems)
    if endpoint is not None and endpoint not in endpoint_ids:
        problems["endpoint"] = "Pick one of your endpoints from the list."
    status = args.get("status", "")
    if status and status not in STATUSES:
        problems["status"] = "Pick pending, delivered or failed."
    filters = delivery_log.Filters(
        subscription_id=endpoint, status=status or None,
        created_from=_time(args.get("from", ""), "from", problems),
        created_to=_time(args.get("to", ""), "to", problems),
        before=_number(args.get("before", ""), "before", problems))
    return filters, problems


@bp.route("/deliveries", methods=["GET"])
def deliveries():
    endpoints = operations.listed(caller())
    filters, problems = _filters(request.args, {s.id for s in endpoints})
    if problems:
        return page("deliveries", 400, endpoints=endpoints, deliveries=[], more=False,
                    problems=problems, args=request.args)
    rows, more = delivery_log.page(caller(), filters, PAGE_SIZE)
    next_args = None
    if more:
        # The filters by name: any other parameter (``_external``, ``_scheme``
        # are url_for's own) would build the link elsewhere.
        next_args = {key: request.args[key] for key in FILTER_PARAMETERS
                     if request.args.get(key)}
        next_args["before"] = rows[-1].id
    return page("deliveries", endpoints=endpoints, deliveries=rows, next_args=next_args,
                problems={}, args=request.args)


def _own_delivery(delivery_id):
    delivery = delivery_log.delivery_with_attempts(caller(), delivery_id)
    if delivery is None:
        raise operations.NotFound(f"No delivery with id {delivery_id}.")
    return delivery


@bp.route(f"/deliveries/{DELIVERY_ID}", methods=["GET"])
def delivery(delivery_id):
    return page("delivery", delivery=_own_delivery(delivery_id),
                done=request.args.get("done"))


@bp.route(f"/deliveries/{DELIVERY_ID}/resend", methods=["POST"])
def resend(delivery_id):
    operations.resend(_own_delivery(delivery_id))
    return redirect(url_for("portal.delivery", delivery_id=delivery_id, done="resent"), 303)


@bp.route(f"/endpoints/{ID}/recover", methods=["GET", "POST"])
def recover(subscription_id):
    subscription = _own(subscription_id)
    if request.method == "GET":
        return page("recover", subscription=subscription, problems={}, since="")
    problems = {}
    since = _time(request.form.get("since", ""), "since", problems)
    if since is None and not problems:
        problems["since"] = "Type the time to recover from, e.g. 2026-01-31T09:00."
    if problems:
        return page("recover", 400, subscription=subscription, problems=problems,
                    since=request.form.get("since", ""))
    queued = operations.recover(subscription, since)
    return page("recover", subscription=subscription, problems={}, since="", queued=queued)
