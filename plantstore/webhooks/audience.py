"""Who hears about what, and who sees which subscription.

An operator's subscription (made with the CLI, no owner) hears about every
plant; a user's (made through the API) hears about the plants its owner
creates, and about every plant when its owner is an admin. Through the API
a user sees only their own subscriptions; an admin sees every one.
"""
from ..models import Subscription

HEARING_ABOUT = """subscription s LEFT JOIN "user" u ON u.id = s.owner_id
WHERE s.is_active AND (s.owner_id IS NULL OR s.owner_id = {owner} OR u.is_admin)"""
"""SQL (a FROM clause): the active subscriptions ``s`` told about a new plant
of the user ``{owner}`` (a parameter marker); SQLite's store selects from it
(see ``queue.store_plant``), PostgreSQL's store functions (migration 0009)
apply the same rule."""


def visible_to(caller):
    """The subscriptions ``caller`` (an ``auth.Caller``) may see and manage."""
    query = Subscription.select()
    if not caller.is_admin:
        query = query.where(Subscription.owner == caller.user_id)
    return query
