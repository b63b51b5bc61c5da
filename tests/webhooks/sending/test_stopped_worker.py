"""The lease is checked as the request leaves: a worker stopped (SIGSTOP)
for longer than its lease, at any moment of its drain, sends nothing for a
job whose lease ran out meanwhile when it wakes (SIGCONT), while another
worker has taken that job over; no webhook-id is ever under way twice at
once. ``PLANTSTORE_TEST_STOP_ROUNDS`` sets the rounds (100 for the figure
docs/guarantees.md quotes)."""
import datetime
import os
import random
import signal

import pytest

from helpers import plantstore_env, wait_until
from plantstore.db import clock
from plantstore.db.models import Delivery
from plugins.webhooks import Answer, overlapping_sends, sleep_until, store_plants, subscribe

ROUNDS = int(os.environ.get("PLANTSTORE_TEST_STOP_ROUNDS", "6"))
STOPPING = {"WEBHOOK_CONNECT_TIMEOUT": 0.3, "WEBHOOK_READ_TIMEOUT": 0.5,
            "WEBHOOK_LEASE_SECONDS": 2, "WEBHOOK_RETRY_SCHEDULE": "0,0,0",
            "WEBHOOK_BREAKER_THRESHOLD": 1000, "WORKER_POLL_INTERVAL": 0.1,
            "WORKER_THREADS": 4, "WEBHOOK_SENDS_PER_RECEIVER": 4}
STOP_PAST_LEASE = datetime.timedelta(seconds=STOPPING["WEBHOOK_LEASE_SECONDS"] + 0.5)
BACKLOG = 250 * ROUNDS + 500


def undelivered():
    return Delivery.select().where(Delivery.status != Delivery.DELIVERED).count()


@pytest.mark.slow
@pytest.mark.app_config(STOPPING)
def test_a_worker_stopped_past_its_lease_sends_nothing_for_it_when_it_wakes(
        app, runner, alice, database_url, make_receiver, start_worker):
    receiver = make_receiver(Answer(200, delay=0.05))
    subscribe(runner, receiver.url)
    store_plants(app, range(BACKLOG), give_back=True)
    environment = {**os.environ, **plantstore_env(database_url, **STOPPING)}
    stopped, other = start_worker(environment), start_worker(environment)
    stopped.wait_started()
    other.wait_started()

    chance = random.Random(ROUNDS)
    for _ in range(ROUNDS):
        # at an arbitrary moment of the drain (a few more requests on)
        receiver.wait_for(len(receiver.requests) + chance.randint(1, 12), timeout=60)
        os.killpg(stopped.process.pid, signal.SIGSTOP)
        try:
            sleep_until(clock.read() + STOP_PAST_LEASE)  # every lease it held ran out
        finally:
            os.killpg(stopped.process.pid, signal.SIGCONT)
    assert undelivered(), "the backlog ran out before the last round"

    wait_until(lambda: undelivered() == 0, timeout=300, interval=0.2,
               message=lambda: f"{undelivered()} deliveries still undelivered")
    for worker in (stopped, other):
        assert worker.stop() == 0, worker.output()[-3000:]
    assert overlapping_sends(receiver.requests) == set()
