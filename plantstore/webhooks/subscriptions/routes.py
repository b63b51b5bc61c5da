"""Self-service webhooks: users register, inspect, test and recover their own
receivers. A subscription that is not the caller's is a 404, exactly like
an unknown id (an admin may manage every one)."""
import contextlib
import re

from flask import g, request
from flask_smorest import abort

from ...web.api import Blueprint, json_response, no_content
from ...web.auth import WEBHOOKS_READ, WEBHOOKS_WRITE
from ...web.paging import link_header_doc, next_page_link
from . import delivery_log, operations
from .schemas import (
    DELIVERY_ID_MAX,
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


def _row_id(raw, name="id", most=ROW_ID_MAX, listed_by="GET /webhooks"):
    """The id a path segment names, or a 400 naming ``name``."""
    # int() is never given more digits than the largest id has.
    if INTEGER.fullmatch(raw) and len(raw) <= len(str(most)) and 1 <= int(raw) <= most:
        return int(raw)
    abort(400, messages={"path": {name: [
        f"Must be an integer from 1 to {most}, e.g. 2 (see {listed_by})."]}})


@contextlib.contextmanager
def _answering_refusals():
    """An operation's refusal (``operations.Refused``) as the API's error:
    its status, and a bad value named in ``details``."""
    try:
        yield
    except operations.Refused as refused:
        if refused.field:
            abort(refused.status, messages={"json": {refused.field: [refused.message]}})
        abort(refused.status, message=refused.message)


def _own(raw_id):
    """The caller's subscription with this id (any one, for an admin), or a 404."""
    subscription_id = _row_id(raw_id)
    with _answering_refusals():
        return operations.own(g.caller, subscription_id)


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
    with _answering_refusals():
        subscription, secret = operations.create(g.caller, new["url"], new.get("bearer"),
                                                 new.get("rate_limit"))
    subscription.secret = secret  # shown in plain text this once
    return subscription, 201, {"Location": f"{request.script_root}/webhooks/{subscription.id}"}


@blp.route("/webhooks", methods=["GET"])
@blp.doc(operationId="listWebhooks")
@blp.login_required(WEBHOOKS_READ)
@blp.response(200, SubscriptionSchema(many=True), description="Your subscriptions")
def list_subscriptions():
    """Lists your webhook subscriptions (an admin sees every one), by id."""
    return operations.listed(g.caller)


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
    with _answering_refusals():
        return operations.update(subscription, changes)


@blp.route("/webhooks/<row_id:id>", methods=["DELETE"])
@blp.doc(operationId="deleteWebhook")
@blp.login_required(WEBHOOKS_WRITE)
@blp.response(204, description="Subscription deleted, with its deliveries")
@blp.documents_errors(400, 404)
def delete_subscription(id):
    """Deletes one of your webhook subscriptions and its deliveries."""
    operations.delete(_own(id))
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
    return operations.enable(_own(id))


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
    with _answering_refusals():
        rotation = operations.rotate(subscription)
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
    deliveries, more = delivery_log.page(g.caller, delivery_log.Filters(
        subscription_id=subscription.id, status=status, before=after), limit)
    headers = {}
    if more:
        headers["Link"] = next_page_link(f"/webhooks/{subscription.id}/deliveries",
                                         limit=limit, status=status or None,
                                         after=deliveries[-1].id)
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
    subscription = _own(id)
    with _answering_refusals():
        delivery = operations.send_test(subscription)
    return delivery_log.with_attempts([delivery])[0], 202


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
    subscription = _own(id)
    with _answering_refusals():
        return {"queued": operations.recover(subscription, recovery["since"])}, 202


@blp.route("/webhooks/<row_id:id>/disable", methods=["POST"])
@blp.doc(operationId="disableWebhook")
@blp.login_required(WEBHOOKS_WRITE)
@blp.response(200, SubscriptionSchema, description="The subscription, disabled")
@blp.documents_errors(400, 404)
def disable_subscription(id):
    """Stops sending to a subscription; its waiting deliveries fail.

    Enable it to send again, then recover what failed meanwhile.
    """
    return operations.disable(_own(id))


def _own_delivery(id, delivery_id):
    """The delivery with this id of the caller's subscription ``id``, or a 404."""
    subscription = _own(id)
    number = _row_id(delivery_id, "delivery_id", DELIVERY_ID_MAX,
                     f"GET /webhooks/{subscription.id}/deliveries")
    delivery = delivery_log.delivery_with_attempts(g.caller, number, subscription.id)
    if delivery is None:
        abort(404, message=f"No delivery with id {number} of webhook subscription "
                           f"{subscription.id}.")
    return delivery


@blp.route("/webhooks/<row_id:id>/deliveries/<delivery_id:delivery_id>", methods=["GET"])
@blp.doc(operationId="getWebhookDelivery")
@blp.login_required(WEBHOOKS_READ)
@blp.response(200, DeliverySchema, description="The delivery, with every attempt")
@blp.documents_errors(400, 404)
def get_delivery(id, delivery_id):
    """Returns one delivery of a subscription with every attempt at it."""
    return _own_delivery(id, delivery_id)


@blp.route("/webhooks/<row_id:id>/deliveries/<delivery_id:delivery_id>/resend",
           methods=["POST"])
@blp.doc(operationId="resendWebhookDelivery")
@blp.login_required(WEBHOOKS_WRITE)
@blp.response(202, DeliverySchema, description="Sent again now, with the same webhook-id")
@blp.documents_errors(400, 404, 409)
def resend_delivery(id, delivery_id):
    """Sends a delivery that was not delivered again now, with its webhook-id.

    It starts over on the retry schedule. 409 when it was already
    delivered, is being sent right now, or the subscription is disabled.
    """
    with _answering_refusals():
        delivery = operations.resend(_own_delivery(id, delivery_id))
    return delivery_log.with_attempts([delivery])[0], 202
