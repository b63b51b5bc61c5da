"""Housekeeping: forget the ``Idempotency-Key`` rows past their time to live
(``web/idempotency.py`` says how keys are kept)."""
from ..db import clock
from ..db.models import IdempotencyKey

PURGE_BATCH_SIZE = 500
"""Most expired keys one ``purge_expired_keys`` call deletes."""


def purge_expired_keys(batch_size=PURGE_BATCH_SIZE):
    """Delete up to ``batch_size`` keys past their time to live; how many were.

    A row taken over meanwhile by a new use of its key is live again and
    stays. A failure is raised to the caller (the runner).
    """
    expired = (IdempotencyKey.select(IdempotencyKey.id)
               .where(IdempotencyKey.expires_at <= clock.now()).limit(batch_size))
    return (IdempotencyKey.delete()
            .where(IdempotencyKey.id.in_(expired),
                   IdempotencyKey.expires_at <= clock.now())
            .execute())


def run(settings):
    """One batch of idempotency keys past their time to live."""
    return purge_expired_keys()
