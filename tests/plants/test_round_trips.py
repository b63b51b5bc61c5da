"""Round trips to PostgreSQL per request, counted by the database.

A real gunicorn serves a database on a throwaway cluster that counts
top-level statements (``pg_stat_statements``, BEGIN and COMMIT included;
see ``plants/conftest.py``). After a warm-up the counts are reset, the
test makes REQUESTS requests of one kind, one after another, and divides.
A failure prints every statement counted, with its calls per request, so
the statements to remove are in front of whoever reads it.
"""
import itertools
import os

import pytest
import requests

from helpers import bearer, plantstore_env, run_plantstore, wait_until
from plantstore.db.models import Delivery
from plugins.servers import Gunicorn

pytestmark = pytest.mark.slow

REQUESTS = 200
WARM_UP = 50
"""Requests of the same kind before counting: imports, caches, pooled
connections and, for announced creates, the sending and outcome threads."""

CREATE_TARGET = 1         # the plant with its deliveries, its token checked in the statement
ANNOUNCED_CREATE_TARGET = 2  # ... and the delivery's outcome
LIST_TARGET = 2           # token, page
IDEMPOTENCY_KEY_EXTRA = 0
"""What a key costs a create: nothing, its claim and answer are written by
the create's own statement (the target allows one statement more)."""


class CountedStore:
    """plantstore under gunicorn on a fresh database of the counting cluster,
    with one user and its token; every request goes through one session."""

    _databases = itertools.count(1)

    def __init__(self, cluster):
        self.cluster = cluster
        self.database = f"round_trips_{next(self._databases)}"
        self.url = cluster.create_database(self.database)
        self.env = {**os.environ, **plantstore_env(self.url)}
        self.plantstore("db", "upgrade")
        self.plantstore("users", "create", "counted")
        self.token = self.plantstore("tokens", "create", "counted").strip()
        self.server = None
        self.session = requests.Session()
        self.next_id = itertools.count(1).__next__

    def plantstore(self, *args):
        """Run the ``plantstore`` command on this database; what it printed."""
        done = run_plantstore(*args, env=self.env)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def serve(self):
        self.server = Gunicorn(self.url, workers=2).start()
        return self

    def stop(self):
        self.session.close()
        if self.server:
            self.server.stop()

    def create(self, idempotency_key=None):
        """POST /plants with a fresh id; fails unless answered 200."""
        headers = bearer(self.token)
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        plant_id = self.next_id()
        response = self.session.post(self.server.url + "/plants", headers=headers,
                                     json={"id": plant_id, "name": f"plant {plant_id}"},
                                     timeout=30)
        assert response.status_code == 200, response.text

    def list_of_10(self):
        """GET /plants?limit=10; fails unless answered 200 with 10 plants."""
        response = self.session.get(self.server.url + "/plants?limit=10",
                                    headers=bearer(self.token), timeout=30)
        assert response.status_code == 200, response.text
        assert len(response.json()) == 10

    def statements_per_request(self, request, settled=lambda: True):
        """Warm up with ``request``, reset the counts, call it REQUESTS times,
        wait until ``settled()``; the statements each call cost and the
        breakdown (a string) to show on failure."""
        for _ in range(WARM_UP):
            request()
        wait_until(settled, timeout=60, message="the warm-up's work to settle")
        self.cluster.reset_counts()
        for _ in range(REQUESTS):
            request()
        wait_until(settled, timeout=60, message="the counted requests' work to settle")
        counts = self.cluster.counts(self.database)
        total = sum(count.calls for count in counts)
        breakdown = "\n".join(f"{count.calls:6d} calls {count.calls / REQUESTS:6.2f}/request  "
                              f"{count.query}" for count in counts)
        per_request = total / REQUESTS
        report = f"{per_request:.2f} statements per request:\n{breakdown}"
        print(report)
        return per_request, report

    def all_deliveries_settled(self):
        """True once no delivery is leased: every attempt's outcome is written,
        and every delivery a busy web process left to the workers given back."""
        with self.cluster.observer(self.database) as connection:
            cursor = connection.cursor()
            cursor.execute("SELECT count(*) FROM delivery WHERE locked_until IS NOT NULL")
            return cursor.fetchone()[0] == 0

    def deliveries(self, status):
        """How many deliveries have ``status``."""
        with self.cluster.observer(self.database) as connection:
            cursor = connection.cursor()
            cursor.execute("SELECT count(*) FROM delivery WHERE status = %s", (status,))
            return cursor.fetchone()[0]


@pytest.fixture
def counted_store(statement_counting_cluster):
    """Make a CountedStore (not yet serving); stopped afterwards."""
    made = []

    def make():
        made.append(CountedStore(statement_counting_cluster))
        return made[-1]
    yield make
    for store in made:
        store.stop()


def test_a_create_nobody_hears_about_costs_one_statement(counted_store):
    store = counted_store().serve()
    per_request, breakdown = store.statements_per_request(store.create)
    assert per_request <= CREATE_TARGET, breakdown


def test_a_create_announced_to_one_receiver_costs_at_most_two_statements_with_its_outcome(
        counted_store, make_receiver):
    receiver = make_receiver()  # answers 200 at once
    store = counted_store()
    store.plantstore("webhooks", "add", receiver.url)
    store.serve()
    per_request, breakdown = store.statements_per_request(
        store.create, settled=store.all_deliveries_settled)
    # A web process busy sending leaves a delivery to the workers (none run
    # here): its lease given back costs what its outcome would have.
    delivered = store.deliveries(Delivery.DELIVERED)
    assert delivered + store.deliveries(Delivery.PENDING) == WARM_UP + REQUESTS
    assert delivered >= (WARM_UP + REQUESTS) // 2, "the web process sent few itself"
    assert len(receiver.requests) >= delivered
    assert per_request <= ANNOUNCED_CREATE_TARGET, breakdown


def test_a_list_of_10_costs_two_statements(counted_store):
    store = counted_store().serve()
    for _ in range(10):
        store.create()
    per_request, breakdown = store.statements_per_request(store.list_of_10)
    assert per_request <= LIST_TARGET, breakdown


def test_an_idempotency_key_costs_a_create_no_statement_more(counted_store):
    store = counted_store().serve()
    without_key, breakdown_without = store.statements_per_request(store.create)
    keys = (f"round-trip-{n}" for n in itertools.count(1))
    with_key, breakdown_with = store.statements_per_request(
        lambda: store.create(idempotency_key=next(keys)))
    assert with_key <= without_key + IDEMPOTENCY_KEY_EXTRA, (
        f"with a key, {breakdown_with}\n\nwithout, {breakdown_without}")
