"""What can be done to a subscription, for every door: the API
(``routes``), the portal and the CLI call these, so a query, a refusal or an
action exists once. Who may see what is ``audience``'s; a refusal is a
``Refused`` carrying its HTTP status and a sentence, which each door words
its own way (a JSON error, a page, a line on stderr).
"""
from flask import current_app

from ...db.models import Delivery, Subscription
from ..config import settings_of, web_sender_of
from ..engine import queue
from ..sending import signing, ssrf
from . import audience, secrets, store

OWNER_DISABLED = "disabled by its owner"
"""The reason an owner's disable records."""


class Refused(Exception):
    """An operation refused: ``status`` (HTTP), ``message`` (a sentence) and,
    for a bad value, the ``field`` it names."""
    status = 409

    def __init__(self, message, field=None):
        super().__init__(message)
        self.message, self.field = message, field


class NotFound(Refused):
    status = 404


class Unreachable(Refused):
    status = 400


def own(caller, subscription_id):
    """The caller's subscription with this id (any one, for an admin), or ``NotFound``."""
    subscription = audience.visible_to(caller).where(
        Subscription.id == subscription_id).first()
    if subscription is None:
        raise NotFound(f"No webhook subscription with id {subscription_id}.")
    return subscription


def listed(caller):
    """The caller's subscriptions (every one, for an admin), by id."""
    return list(audience.visible_to(caller).order_by(Subscription.id))


def check_reachable(url):
    """``Unreachable`` naming ``url`` unless it leads only where users'
    subscriptions may send (see ``ssrf``)."""
    settings = settings_of(current_app)
    refusal = ssrf.check_url(url, ssrf.Policy(settings.allowed_networks,
                                              settings.connect_timeout))
    if refusal:
        raise Unreachable(refusal, field="url")


def active(subscription):
    """``subscription`` if it is active; a refusal saying to enable it otherwise."""
    if not subscription.is_active:
        raise Refused(f"Webhook subscription {subscription.id} is disabled "
                      f"({subscription.disabled_reason or 'no reason recorded'}); "
                      "enable it first.")
    return subscription


def create(caller, url, bearer=None, rate_limit=None):
    """A new subscription of the caller; (subscription, its secret shown once)."""
    check_reachable(url)
    most = current_app.config["WEBHOOK_MAX_PER_USER"]
    secret = signing.new_secret()
    try:
        subscription = store.add(caller.user_id, url, bearer, rate_limit, secret, most=most)
    except store.TooManySubscriptions as refused:
        raise Refused(f"You already hold {refused.held} webhook subscriptions, the most "
                      f"allowed ({most}); delete one first.") from None
    return subscription, secret


def update(subscription, changes):
    """Change the URL, bearer token or rate limit (``store.change``'s fields);
    the subscription as it is now."""
    if "url" in changes:
        check_reachable(changes["url"])
    if not store.change(subscription.id, **changes):  # deleted meanwhile
        raise NotFound(f"No webhook subscription with id {subscription.id}.")
    return Subscription.get_by_id(subscription.id)


def delete(subscription):
    """Delete a subscription with its deliveries and their log."""
    queue.delete_subscription(subscription.id)


def enable(subscription):
    """Send to it again; the subscription as it is now."""
    queue.enable(subscription.id)
    return Subscription.get_by_id(subscription.id)


def disable(subscription):
    """Stop sending to it (its waiting deliveries fail; ``recover`` sends
    them again once enabled); the subscription as it is now."""
    if subscription.is_active:
        queue.disable_by_owner(subscription.id, OWNER_DISABLED)
    return Subscription.get_by_id(subscription.id)


def rotate(subscription):
    """A new signing secret (``secrets.Rotation``)."""
    rotation = secrets.rotate(subscription.id, settings_of(current_app).secret_overlap_hours)
    if rotation is None:  # deleted meanwhile
        raise NotFound(f"No webhook subscription with id {subscription.id}.")
    return rotation


def send_test(subscription):
    """Queue a signed example event (plant.test) for an active subscription."""
    return queue.enqueue_test_event(active(subscription).id)


def recover(subscription, since):
    """Queue again what failed since ``since`` (naive UTC); how many."""
    return queue.recover(active(subscription).id, since)


def resend(delivery):
    """Send a delivery that is not delivered again now, with its webhook-id:
    leased to this process and offered to its sender (the workers take it
    when no slot is free); the delivery as it is now."""
    if delivery.status == Delivery.DELIVERED:
        when = (f" ({delivery.delivered_at:%Y-%m-%d %H:%M:%S} UTC)"
                if delivery.delivered_at else "")
        raise Refused(f"Delivery {delivery.id} was already delivered{when}.")
    active(delivery.subscription)
    try:
        job = queue.take_for_resend(delivery.id, settings_of(current_app))
    except queue.ResendRefused:
        raise Refused(f"Delivery {delivery.id} is being sent right now; try again "
                      "in a moment.") from None
    web_sender_of(current_app).offer([job])
    return Delivery.get_by_id(delivery.id)
