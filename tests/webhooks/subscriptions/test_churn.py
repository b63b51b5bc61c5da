"""Subscriptions change under load without lying or deadlocking
(PostgreSQL, where many writers lock rows): creates run for
``CHURN_SECONDS`` while the same users' subscriptions are added, patched,
enabled, recovered and deleted every 0.25 s, receivers fail (500, and 410
which disables), an operator's subscription hears every plant and two
workers write outcomes. No create answers a false 409 or a 5xx, no
statement deadlocks (``pg_stat_database.deadlocks`` before and after),
every plant answered 200 is stored, and announced to every subscription
that existed throughout."""
import itertools
import os
import threading

import pytest

from helpers import POSTGRES_URL, bearer, post_plant, wait_until
from plantstore.db import database
from plantstore.db.models import Delivery, Plant, User
from plantstore.housekeeping.runner import Housekeeping
from plantstore.webhooks.config import settings_of
from plantstore.webhooks.sending.worker import Worker
from plugins.webhooks import PATIENT_SENDS, Answer, subscribe

CHURN_SECONDS = float(os.environ.get("PLANTSTORE_TEST_CHURN_SECONDS", "60"))
CHANGE_EVERY = 0.25
CHURNING = {**PATIENT_SENDS, "WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
            "WEBHOOK_RETRY_SCHEDULE": "0,0", "WEBHOOK_BREAKER_THRESHOLD": 3,
            "WEBHOOK_BREAKER_COOLDOWN": 0.1, "WORKER_POLL_INTERVAL": 0.05}


def deadlocks():
    """Deadlocks PostgreSQL has counted in this database."""
    with database.connection_context():
        return database.execute_sql(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()[0]


def others_connected():
    """Backends on this database besides the one asking."""
    with database.connection_context():
        return database.execute_sql(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchone()[0]


class Load:
    """Threads that each call ``step(client, n)`` until stopped, recording
    every answer's status."""

    def __init__(self, app):
        self.app = app
        self.stop = threading.Event()
        self.statuses = []
        self.threads = []

    def run(self, step):
        def loop():
            client = self.app.test_client()
            for n in itertools.count():
                if self.stop.is_set():
                    return
                step(client, n)
        self.threads.append(threading.Thread(target=loop, daemon=True))
        self.threads[-1].start()

    def note(self, response, *expected):
        self.statuses.append(response.status_code)
        assert response.status_code in expected, (response.status_code, response.get_json())

    def end(self):
        self.stop.set()
        for thread in self.threads:
            thread.join(60)
            assert not thread.is_alive()


@pytest.mark.slow
@pytest.mark.skipif(not POSTGRES_URL, reason="PostgreSQL's row locks and deadlocks")
@pytest.mark.app_config(CHURNING)
def test_creates_beside_churning_subscriptions_never_lie_or_deadlock(
        app, runner, alice, bob, make_receiver):
    healthy, failing = make_receiver(Answer(200)), make_receiver(Answer(500))
    gone = make_receiver(Answer(410))
    operator_id, _ = subscribe(runner, failing.url)
    tokens = {"alice": alice, "bob": bob}
    lasting = {}
    client = app.test_client()
    for name, token in tokens.items():
        response = client.post("/webhooks", json={"url": healthy.url}, headers=bearer(token))
        assert response.status_code == 201
        lasting[name] = response.get_json()["id"]
    deadlocks_before = deadlocks()

    load = Load(app)
    created = {name: [] for name in tokens}
    for offset, name in enumerate(tokens):
        def create(client, n, name=name, offset=offset):
            plant_id = 1 + offset + 2 * n
            response = post_plant(client, tokens[name], {"id": plant_id, "name": "fern"})
            load.note(response, 200)
            created[name].append(plant_id)
        load.run(create)

        def churn(client, n, token=tokens[name]):
            url = (failing, gone)[n % 2].url
            response = client.post("/webhooks", json={"url": url}, headers=bearer(token))
            load.note(response, 201)
            path = f"/webhooks/{response.get_json()['id']}"
            load.note(client.patch(path, json={"rate_limit": 1 + n % 5},
                                   headers=bearer(token)), 200)
            load.note(client.post(f"{path}/enable", headers=bearer(token)), 200)
            load.note(client.post(f"{path}/recover", json={"since": "2000-01-01T00:00:00Z"},
                                  headers=bearer(token)), 202, 409)
            load.stop.wait(CHANGE_EVERY)
            load.note(client.delete(path, headers=bearer(token)), 204)
        load.run(churn)
    workers = [Worker(settings_of(app), Housekeeping()) for _ in range(2)]
    worker_threads = [threading.Thread(target=worker.run_forever, daemon=True)
                      for worker in workers]
    for thread in worker_threads:
        thread.start()
    try:
        load.stop.wait(CHURN_SECONDS)
    finally:
        load.end()
        for worker in workers:
            worker.stop()
        for thread in worker_threads:
            thread.join(60)
    assert sum(map(len, created.values())) > 100, "the creates hardly ran"
    assert load.statuses.count(204) > 10, "the subscriptions hardly changed"

    for name in tokens:  # every 200 stored
        owner = User.get(User.name == name).id
        stored = {p.id for p in Plant.select(Plant.id).where(Plant.owner == owner)}
        assert stored == set(created[name])
    everything = set(created["alice"]) | set(created["bob"])
    for subscription_id, heard in ((lasting["alice"], set(created["alice"])),
                                   (lasting["bob"], set(created["bob"])),
                                   (operator_id, everything)):
        announced = [int(d.payload.split('"id": ')[1].split(",")[0]) for d in
                     Delivery.select(Delivery.payload)
                     .where(Delivery.subscription == subscription_id)]
        assert sorted(announced) == sorted(heard), subscription_id

    database.close_all()  # their backends exit, and a backend's counts are flushed at exit
    wait_until(lambda: others_connected() == 0, 30, message="the test's connections to close")
    assert deadlocks() == deadlocks_before
