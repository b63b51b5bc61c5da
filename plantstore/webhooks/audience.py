"""Who hears about what, and who sees which subscription.

An operator's subscription (made with the CLI, no owner) hears about every
plant; a user's (made through the API) hears about the plants its owner
creates, and about every plant when its owner is an admin. Through the API
a user sees only their own subscriptions; an admin sees every one.
"""
from peewee import JOIN

from ..db import Statement
from ..models import Subscription, User

# Every create runs this: compiled once (see db.Statement).
_HEARING = Statement(
    lambda active, owner, admin: Subscription.select(Subscription)
    .join(User, JOIN.LEFT_OUTER, on=(Subscription.owner == User.id))
    .where(Subscription.is_active == active,
           Subscription.owner.is_null() | (Subscription.owner == owner)
           | (User.is_admin == admin))
    .order_by(Subscription.id),
    True, -1, True)


def hearing_about(owner_id):
    """The active subscriptions told about a new plant of user ``owner_id``."""
    return _HEARING.models(Subscription, True, owner_id, True)


def visible_to(caller):
    """The subscriptions ``caller`` (an ``auth.Caller``) may see and manage."""
    query = Subscription.select()
    if not caller.is_admin:
        query = query.where(Subscription.owner == caller.user_id)
    return query
