"""``python bench/worker_queue.py URL RECEIVER_URL COUNT [SUBSCRIPTIONS OWNERS]``:
a fresh database for the drain-rate measurement: migrated, one subscription
to RECEIVER_URL (or SUBSCRIPTIONS, owned by OWNERS users in turn; 0: the
operator's) and COUNT deliveries due now, spread over the subscriptions in
turn.

Run as a process of its own so that the plantstore it imports can be another
working tree's (PYTHONPATH first), migrating and filling that release's
schema with that release's models: bench/webhooks.py measures this
checkout's worker beside another's that way. It uses only what every
release since the outbox has (``db.upgrade``, the Subscription and Delivery
columns named below).
"""
import sys


def queue(url, receiver_url, count, subscriptions=1, owners=0):
    """Migrate ``url`` and put ``count`` deliveries to ``receiver_url`` on
    it, over ``subscriptions`` owned by ``owners`` users in turn."""
    from plantstore import create_app, db
    from plantstore.db.models import Delivery, Subscription, User, utcnow

    app = create_app({"DATABASE_URL": url})
    with app.app_context():
        db.upgrade()
    with db.database.connection_context(), db.database.atomic():
        users = [User.create(name=f"owner{n}") for n in range(owners)]
        made = [Subscription.create(url=receiver_url, secret="whsec_" + "A" * 44,
                                    owner=users[n % owners] if users else None).id
                for n in range(subscriptions)]
        now = utcnow()
        rows = [{"subscription": made[i % subscriptions], "message_id": f"msg_bench{i}",
                 "event_type": "plant.created", "payload": f'{{"id": {i}, "name": "fern"}}',
                 "next_attempt_at": now} for i in range(count)]
        for start in range(0, count, 1000):
            Delivery.insert_many(rows[start:start + 1000]).execute()
    with db.database.connection_context():
        db.database.execute_sql("ANALYZE")  # as autovacuum would, in time (see seed.py)
    db.database.close_all()


if __name__ == "__main__":
    queue(sys.argv[1], sys.argv[2], *map(int, sys.argv[3:]))
