"""The plant routes' hot SQL: the named statements of ``queries.sql`` (see
``db.named_sql``); building and compiling their peewee queries cost more
than running them (measured with timeit on SQLite: a list page 90 µs to
build and compile, 5 µs to run a compiled one, of requests of 300-400 µs).

A new plant is stored with its webhook deliveries by the delivery store
(``webhooks.store_and_announce``).
"""
import os

from ..db.named_sql import Queries

QUERIES = Queries(os.path.join(os.path.dirname(__file__), "queries.sql"))


def page(caller, after, limit):
    """Up to ``limit`` rows (``id``, ``name``, ``tag``) the caller may see, ids above ``after``."""
    if caller.is_admin:
        if after is None:
            return QUERIES.rows("all_first", {"limit": limit})
        return QUERIES.rows("all_after", {"after": after, "limit": limit})
    if after is None:
        return QUERIES.rows("own_first", {"owner": caller.user_id, "limit": limit})
    return QUERIES.rows("own_after", {"owner": caller.user_id, "after": after, "limit": limit})
