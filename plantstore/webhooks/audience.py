"""Who hears about what, and who sees which subscription.

An operator's subscription (made with the CLI, no owner) hears about every
plant; a user's (made through the API) hears about the plants its owner
creates, and about every plant when its owner is an admin. Through the API
a user sees only their own subscriptions; an admin sees every one.
"""
from peewee import JOIN

from ..models import Subscription, User


def hearing_about(owner_id):
    """The active subscriptions told about a new plant of user ``owner_id``
    (on PostgreSQL the create's one statement says the same: see
    ``queue_sql.STORE_PLANT_WITH_DELIVERIES``)."""
    return (Subscription.select(Subscription)
            .join(User, JOIN.LEFT_OUTER, on=(Subscription.owner == User.id))
            .where(Subscription.is_active == True,  # noqa: E712
                   Subscription.owner.is_null() | (Subscription.owner == owner_id)
                   | (User.is_admin == True))  # noqa: E712
            .order_by(Subscription.id))


def visible_to(caller):
    """The subscriptions ``caller`` (an ``auth.Caller``) may see and manage."""
    query = Subscription.select()
    if not caller.is_admin:
        query = query.where(Subscription.owner == caller.user_id)
    return query
