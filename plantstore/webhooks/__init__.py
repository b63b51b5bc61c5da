"""The "New Plant" webhook: the outbox, signing, sending and the worker.

The create route's one entry point is ``announce``.
"""
from ..db import database
from . import outbox


def announce(plant, dispatcher):
    """Record ``plant``'s deliveries in the current transaction, and have the
    ``dispatcher`` attempt them once that transaction commits.

    Never waits for a receiver: the attempts run in the dispatcher's
    threads, and deliveries that find no free slot are left to the workers.
    If the transaction rolls back, nothing is recorded and nothing sent.
    """
    jobs = outbox.record_new_plant(plant, dispatcher.settings)
    if jobs:
        database.after_commit(lambda: dispatcher.send_or_leave(jobs))
