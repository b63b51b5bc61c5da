"""Self-service webhooks: users register, inspect, test and recover their own
receivers. A subscription that is not the caller's is a 404, exactly like
an unknown id (an admin may manage every one)."""
import collections
import re

from flask import current_app, g, request
from flask_smorest import abort

from ...db.models import Attempt, Delivery, Subscription
from ...web.api import Blueprint, json_response, no_content
from ...web.auth import WEBHOOKS_READ, WEBHOOKS_WRITE
from ...web.paging import link_header_doc, next_page_link
from ..config import settings_of
from ..engine import queue
from ..engine.refusals import disabled_refusal
from ..receivers import ssrf
from . import audience, secrets, store
from .schemas import (
    ROW_ID_MAX,
    CreatedSubscriptionSchema,
    DeliveryQueryArgsSchema,
    DeliverySchema,
    NewSubscriptionSchema,
    RecoveredSchema,
    RecoverSchema,
    RotatedSecretSchema,
    SubscriptionSchema,
    UpdatedSubscriptionSchema,
)

INTEGER = re.compile(r"-?[0-9]+")

# Named apart from the document's own "webhooks" (the New Plant event).
blp = Blueprint("webhook-receivers", __name__, description="Your webhook receivers")

LINK_HEADER_DOC = link_header_doc("older deliveries")
LOCATION_HEADER_DOC = {"Location": {"description": "The new subscription",
                                    "schema": {"type": "string"}}}


def _row_id(raw):
    """The subscription id a path segment names, or a 400 naming ``id``."""
    # int() is never given more digits than the largest id has.
    if INTEGER.fullmatch(raw) and len(raw) <= len(str(ROW_ID_MAX)) \
            and 1 <= int(raw) <= ROW_ID_MAX:
        return int(raw)
    abort(400, messages={"path": {"id": [
        f"Must be an integer from 1 to {ROW_ID_MAX}, e.g. 2 (see GET /webhooks)."]}})


def _own(raw_id):
    """The caller's subscription with this id (any one, for an admin), or a 404."""
    subscription_id = _row_id(raw_id)
    subscription = audience.visible_to(g.caller).where(
        Subscription.id == subscription_id).first()
    if subscription is None:
        abort(404, message=f"No webhook subscription with id {subscription_id}.")
    return subscription


def _check_reachable(url):
    """A 400 naming ``url`` unless it leads only where API subscriptions may
    send (see ``ssrf``)."""
    settings = settings_of(current_app)
    refusal = ssrf.check_url(url, ssrf.Policy(settings.allowed_networks,
                                              settings.connect_timeout))
    if refusal:
        abort(400, messages={"json": {"url": [refusal]}})


def _active(subscription):
    """``subscription`` if it is active; a 409 saying to enable it otherwise."""
    if not subscription.is_active:
        refusal = disabled_refusal(subscription, f"POST /webhooks/{subscription.id}/enable")
        abort(409, message=f"{refusal[0].upper()}{refusal[1:]}.")
    return subscription


@blp.route("/webhooks", methods=["POST"])
@blp.doc(operationId="createWebhook")
@blp.login_required(WEBHOOKS_WRITE)
@blp.json_body(NewSubscriptionSchema, description="The receiver to register")
@blp.response(201, CreatedSubscriptionSchema, headers=LOCATION_HEADER_DOC,
              description="Registered; the secret is shown only in this answer")
@blp.documents_errors(409)
def create_subscription(new):
    """Registers a receiver for New Plant events about your plants.

    The URL must reach public addresses only (400 naming `url` otherwise).
    An admin's subscription hears about every plant. 409 when you already
    hold as many subscriptions as the operator allows.
    """
    _check_reachable(new["url"])
    most = current_app.config["WEBHOOK_MAX_PER_USER"]
    try:
        subscription, secret = store.add(g.caller.user_id, new["url"], new.get("bearer"),
                                         new.get("rate_limit"), most=most)
    except store.TooManySubscriptions as refused:
        abort(409, message=f"You already hold {refused.held} webhook subscriptions, the "
                           f"most allowed ({most}); delete one first.")
    subscription.secret = secret  # shown in plain text this once
    return subscription, 201, {"Location": f"{request.script_root}/webhooks/{subscription.id}"}


@blp.route("/webhooks", methods=["GET"])
@blp.doc(operationId="listWebhooks")
@blp.login_required(WEBHOOKS_READ)
@blp.response(200, SubscriptionSchema(many=True), description="Your subscriptions")
def list_subscriptions():
    """Lists your webhook subscriptions (an admin sees every one), by id."""
    return list(audience.visible_to(g.caller).order_by(Subscription.id))


@blp.route("/webhooks/<row_id:id>", methods=["GET"])
@blp.doc(operationId="getWebhook")
@blp.login_required(WEBHOOKS_READ)
@blp.response(200, SubscriptionSchema, description="The subscription")
@blp.documents_errors(400, 404)
def get_subscription(id):
    """Returns one of your webhook subscriptions."""
    return _own(id)


@blp.route("/webhooks/<row_id:id>", methods=["PATCH"])
@blp.login_required(WEBHOOKS_WRITE)
@blp.json_body(UpdatedSubscriptionSchema, description="What to change")
@blp.response(200, SubscriptionSchema, description="The subscription, changed")
@blp.documents_errors(400, 404)
@blp.doc(operationId="updateWebhook")
def update_subscription(changes, id):
    """Changes a subscription's URL, bearer token or rate limit.

    Fields left out stay as they are; `null` removes the bearer token or the
    rate limit. A new URL is checked as at registration (400 naming `url`).
    Its secret, deliveries and their log are kept; deliveries not yet sent
    go to the new URL with the new token.
    """
    subscription = _own(id)
    if "url" in changes:
        _check_reachable(changes["url"])
    if not store.change(subscription.id, **changes):  # deleted meanwhile
        abort(404, message=f"No webhook subscription with id {subscription.id}.")
    return Subscription.get_by_id(subscription.id)


@blp.route("/webhooks/<row_id:id>", methods=["DELETE"])
@blp.doc(operationId="deleteWebhook")
@blp.login_required(WEBHOOKS_WRITE)
@blp.response(204, description="Subscription deleted, with its deliveries")
@blp.documents_errors(400, 404)
def delete_subscription(id):
    """Deletes one of your webhook subscriptions and its deliveries."""
    queue.delete_subscription(_own(id).id)
    return no_content()


@blp.route("/webhooks/<row_id:id>/enable", methods=["POST"])
@blp.doc(operationId="enableWebhook")
@blp.login_required(WEBHOOKS_WRITE)
@blp.response(200, SubscriptionSchema, description="The subscription, active")
@blp.documents_errors(400, 404)
def enable_subscription(id):
    """Sends to a subscription again after a 410 or sustained failure disabled it.

    Deliveries failed meanwhile stay failed; send them again with recover.
    """
    subscription = _own(id)
    queue.enable(subscription.id)
    return Subscription.get_by_id(subscription.id)


@blp.route("/webhooks/<row_id:id>/rotate-secret", methods=["POST"])
@blp.doc(operationId="rotateWebhookSecret")
@blp.login_required(WEBHOOKS_WRITE)
@blp.response(200, RotatedSecretSchema, description="The new secret, shown only here")
@blp.documents_errors(400, 404)
def rotate_secret(id):
    """Gives a subscription a new signing secret.

    Every secret rotated out keeps signing beside the new one until its own
    overlap ends (PLANTSTORE_WEBHOOK_SECRET_OVERLAP_HOURS; at most four at
    once, the one ending first is dropped beyond that).
    """
    subscription = _own(id)
    rotation = secrets.rotate(subscription.id,
                              settings_of(current_app).secret_overlap_hours)
    if rotation is None:  # deleted meanwhile
        abort(404, message=f"No webhook subscription with id {subscription.id}.")
    return {"secret": rotation.secret,
            "previous_secret_expires_at": rotation.previous_expires_at}


@blp.route("/webhooks/<row_id:id>/deliveries", methods=["GET"])
@blp.doc(operationId="listWebhookDeliveries")
@blp.login_required(WEBHOOKS_READ)
@blp.arguments(DeliveryQueryArgsSchema, location="query", as_kwargs=True)
@blp.response(200, DeliverySchema(many=True), headers=LINK_HEADER_DOC,
              description="Deliveries, newest first, with every attempt")
@blp.documents_errors(404)
def list_deliveries(id, limit, status=None, after=None):
    """Lists a subscription's deliveries, newest first, with every attempt.

    When older deliveries remain, a Link header points at the next page.
    """
    subscription = _own(id)
    query = (Delivery.select().where(Delivery.subscription == subscription.id)
             .order_by(Delivery.id.desc()).limit(limit + 1))
    if status:
        query = query.where(Delivery.status == status)
    if after is not None:
        query = query.where(Delivery.id < after)
    deliveries = list(query)
    headers = {}
    if len(deliveries) > limit:
        deliveries = deliveries[:limit]
        headers["Link"] = next_page_link(f"/webhooks/{subscription.id}/deliveries",
                                         limit=limit, status=status or None,
                                         after=deliveries[-1].id)
    attempts = collections.defaultdict(list)
    if deliveries:
        for attempt in (Attempt.select()
                        .where(Attempt.delivery.in_([d.id for d in deliveries]))
                        .order_by(Attempt.started_at, Attempt.id)):
            attempts[attempt.delivery_id].append(attempt)
    for delivery in deliveries:
        delivery.attempt_rows = attempts[delivery.id]
        delivery.next_attempt = (delivery.next_attempt_at
                                 if delivery.status == Delivery.PENDING else None)
    return json_response(DeliverySchema(many=True).dump(deliveries), headers=headers)


@blp.route("/webhooks/<row_id:id>/test", methods=["POST"])
@blp.doc(operationId="sendTestWebhookEvent")
@blp.login_required(WEBHOOKS_WRITE)
@blp.response(202, DeliverySchema, description="Queued: the workers send it at once")
@blp.documents_errors(400, 404, 409)
def send_test_event(id):
    """Sends a signed example New Plant event to the receiver.

    It is recorded as a delivery (event plant.test) and retried like any
    other. 409 when the subscription is disabled.
    """
    subscription = _active(_own(id))
    delivery = queue.enqueue_test_event(subscription.id)
    delivery.attempt_rows = []
    delivery.next_attempt = delivery.next_attempt_at
    return delivery, 202


@blp.route("/webhooks/<row_id:id>/recover", methods=["POST"])
@blp.doc(operationId="recoverWebhookDeliveries")
@blp.login_required(WEBHOOKS_WRITE)
@blp.json_body(RecoverSchema, description="Send again what failed since this time")
@blp.response(202, RecoveredSchema, description="Queued again, with the same webhook-id")
@blp.documents_errors(400, 404, 409)
def recover_deliveries(recovery, id):
    """Sends again every failed delivery of a subscription created since a time.

    Each keeps its webhook-id, so receivers can tell a repeat. 409 when the
    subscription is disabled (enable it first).
    """
    subscription = _active(_own(id))
    return {"queued": queue.recover(subscription.id, recovery["since"])}, 202
