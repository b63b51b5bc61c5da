"""Idempotency keys as stored, apart from ``idempotency.py`` (which answers
requests) so that the worker imports no part of the web's: ``KeyTaken``, a
create's statement that claimed no key (raised by the stores), and
``purge_expired_keys``, which the worker's maintenance
(``webhooks/sending/maintenance.py``) runs."""
from ..db import clock
from ..db.models import IdempotencyKey


class KeyTaken(Exception):
    """A create's statement did not claim its key, and wrote nothing: whether
    the key's lock was free, and the key's committed row as found
    (fingerprint, status, content type, body, expired; all None if none)."""

    def __init__(self, held, *found):
        super().__init__("the idempotency key is taken")
        self.held, self.found = held, found


PURGE_BATCH_SIZE = 500
"""Most expired keys one ``purge_expired_keys`` call deletes."""


def purge_expired_keys(batch_size=PURGE_BATCH_SIZE):
    """Delete up to ``batch_size`` keys past their time to live; how many were.

    A row taken over meanwhile by a new use of its key is live again and
    stays. A failure is raised to the caller (the worker's maintenance).
    """
    expired = (IdempotencyKey.select(IdempotencyKey.id)
               .where(IdempotencyKey.expires_at <= clock.now()).limit(batch_size))
    return (IdempotencyKey.delete()
            .where(IdempotencyKey.id.in_(expired),
                   IdempotencyKey.expires_at <= clock.now())
            .execute())
