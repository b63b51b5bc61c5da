"""The plant routes' hot SQL, as text (see ``db.Statement``).

- ``page``: keyset pages of the plants a caller may see. One statement per
  shape (own plants or all of them, first page or after a cursor), so a
  list costs one index range scan and no query building. Each reads
  ``(id, name, tag)`` rows ordered by id, through the ``(owner_id, id)``
  index for a user and the primary key for an admin.

A new plant is stored with its webhook deliveries by the delivery store
(``webhooks.store_and_announce``).
"""
from ..db import Statement

_OWN_FIRST = Statement(
    "SELECT id, name, tag FROM plant WHERE owner_id = {p} ORDER BY id LIMIT {p}")
_OWN_AFTER = Statement(
    "SELECT id, name, tag FROM plant WHERE owner_id = {p} AND id > {p} ORDER BY id LIMIT {p}")
_ALL_FIRST = Statement("SELECT id, name, tag FROM plant ORDER BY id LIMIT {p}")
_ALL_AFTER = Statement("SELECT id, name, tag FROM plant WHERE id > {p} ORDER BY id LIMIT {p}")


def page(caller, after, limit):
    """Up to ``limit`` (id, name, tag) rows the caller may see, ids above ``after``."""
    if caller.is_admin:
        if after is None:
            return _ALL_FIRST.rows(limit)
        return _ALL_AFTER.rows(after, limit)
    if after is None:
        return _OWN_FIRST.rows(caller.user_id, limit)
    return _OWN_AFTER.rows(caller.user_id, after, limit)
