"""Who hears about what, and who sees which subscription.

An operator's subscription (made with the CLI, no owner) hears about every
plant; a user's (made through the API) hears about the plants its owner
creates, and about every plant when its owner is an admin. Through the API
a user sees only their own subscriptions; an admin sees every one.

Who hears about a new plant is SQL, in the stores: SQLite's ``audience``
query (``webhooks/engine/store/sqlite.sql``) and PostgreSQL's store functions
(``migrations/functions/plantstore_store_plant_v2.sql``).
"""
from ...db.models import Subscription


def visible_to(caller):
    """The subscriptions ``caller`` (an ``auth.Caller``) may see and manage."""
    query = Subscription.select()
    if not caller.is_admin:
        query = query.where(Subscription.owner == caller.user_id)
    return query
