"""The plant routes' hot SQL, compiled once (see ``db.Statement``).

- ``page``: keyset pages of the plants a caller may see. One statement per
  shape (own plants or all of them, first page or after a cursor), so a
  list costs one index range scan and no query building. Each reads
  ``(id, name, tag)`` rows ordered by id, through the ``(owner_id, id)``
  index for a user and the primary key for an admin.

A new plant is stored with its webhook deliveries (``webhooks.store_and_announce``).
"""
from ..db import Statement
from ..models import Plant

_COLUMNS = (Plant.id, Plant.name, Plant.tag)

_OWN_FIRST = Statement(
    lambda owner, limit: Plant.select(*_COLUMNS).where(Plant.owner == owner)
    .order_by(Plant.id).limit(limit), -1, -2)
_OWN_AFTER = Statement(
    lambda owner, after, limit: Plant.select(*_COLUMNS)
    .where(Plant.owner == owner, Plant.id > after).order_by(Plant.id).limit(limit),
    -1, -2, -3)
_ALL_FIRST = Statement(
    lambda limit: Plant.select(*_COLUMNS).order_by(Plant.id).limit(limit), -1)
_ALL_AFTER = Statement(
    lambda after, limit: Plant.select(*_COLUMNS).where(Plant.id > after)
    .order_by(Plant.id).limit(limit), -1, -2)


def page(caller, after, limit):
    """Up to ``limit`` (id, name, tag) rows the caller may see, ids above ``after``."""
    if caller.is_admin:
        if after is None:
            return _ALL_FIRST.rows(limit)
        return _ALL_AFTER.rows(after, limit)
    if after is None:
        return _OWN_FIRST.rows(caller.user_id, limit)
    return _OWN_AFTER.rows(caller.user_id, after, limit)
