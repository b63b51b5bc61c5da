"""The Endpoints pages: the session's subscriptions, and every change to one."""
from flask import redirect, request, url_for

from ..webhooks.subscriptions import delivery_log, operations
from ..webhooks.subscriptions.schemas import ROW_ID_MAX
from .blueprint import bp, caller, page
from .forms import endpoint_fields

ID = f"<int(min=1, max={ROW_ID_MAX}):subscription_id>"


def _own(subscription_id):
    return operations.own(caller(), subscription_id)


def _to_list():
    return redirect(url_for("portal.endpoints"), 303)


@bp.route("/endpoints", methods=["GET"])
def endpoints():
    subscriptions = operations.listed(caller())
    last = delivery_log.last_attempts([s.id for s in subscriptions])
    return page("endpoints", subscriptions=subscriptions, last_attempts=last,
                done=request.args.get("done"))


@bp.route("/endpoints/new", methods=["GET", "POST"])
def new_endpoint():
    if request.method == "GET":
        return page("endpoint_form", values={}, problems={})
    values, problems = endpoint_fields(request.form)
    if not problems:
        try:
            subscription, secret = operations.create(caller(), **values)
        except operations.Refused as refused:
            problems[refused.field or "form"] = refused.message
        else:
            return page("secret", 201, subscription=subscription, secret=secret,
                        created=True)
    return page("endpoint_form", 400, values=values, problems=problems)


@bp.route(f"/endpoints/{ID}/edit", methods=["GET", "POST"])
def edit_endpoint(subscription_id):
    subscription = _own(subscription_id)
    if request.method == "GET":
        return page("endpoint_form", subscription=subscription, problems={},
                    values={"url": subscription.url, "rate_limit": subscription.rate_limit})
    values, problems = endpoint_fields(request.form, editing=True)
    if not problems:
        try:
            operations.update(subscription, values)
        except operations.Unreachable as refused:
            problems["url"] = refused.message
        else:
            return redirect(url_for("portal.endpoints", done="saved"), 303)
    return page("endpoint_form", 400, subscription=subscription, values=values,
                problems=problems)


@bp.route(f"/endpoints/{ID}/disable", methods=["POST"])
def disable_endpoint(subscription_id):
    operations.disable(_own(subscription_id))
    return redirect(url_for("portal.endpoints", done="disabled"), 303)


@bp.route(f"/endpoints/{ID}/enable", methods=["POST"])
def enable_endpoint(subscription_id):
    operations.enable(_own(subscription_id))
    return redirect(url_for("portal.endpoints", done="enabled"), 303)


@bp.route(f"/endpoints/{ID}/delete", methods=["GET", "POST"])
def delete_endpoint(subscription_id):
    subscription = _own(subscription_id)
    if request.method == "GET":
        return page("confirm_delete", subscription=subscription)
    operations.delete(subscription)
    return redirect(url_for("portal.endpoints", done="deleted"), 303)


@bp.route(f"/endpoints/{ID}/rotate-secret", methods=["POST"])
def rotate_secret(subscription_id):
    subscription = _own(subscription_id)
    rotation = operations.rotate(subscription)
    return page("secret", subscription=subscription, secret=rotation.secret,
                previous_expires_at=rotation.previous_expires_at)


@bp.route(f"/endpoints/{ID}/test", methods=["POST"])
def send_test(subscription_id):
    delivery = operations.send_test(_own(subscription_id))
    return redirect(url_for("portal.delivery", delivery_id=delivery.id), 303)
