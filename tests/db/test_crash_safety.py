"""Nothing lost on a crash: SIGKILL of the whole gunicorn process group in
the middle of a burst of creates, while the webhook receiver is failing.

After a restart, every plant whose create was answered 200 is listed by
the API, and one ``plantstore worker --once`` run (a fresh process) brings
each of their "New Plant" events to the receiver, signed.
"""
import os

import pytest
import requests

from helpers import bearer, plantstore_env, run_plantstore, walk_pages
from plantstore.db.models import Subscription
from plugins.servers import create_until_sigkilled
from plugins.webhooks import (
    SHORT_LEASES,
    Answer,
    sleep_until,
    subscribe,
    verify,
    wait_for_leases_to_run_out,
)

# The receiver is down during the burst, so its breaker opens; the worker
# runs once its probe is due.
CRASH_SETTINGS = {**SHORT_LEASES, "WEBHOOK_BREAKER_COOLDOWN": 1}
CLIENTS = 4
ANSWERED_BEFORE_KILL = 60

pytestmark = pytest.mark.app_config(CRASH_SETTINGS)


def listed_names(url, token):
    """Every plant name the API lists for ``token``, walking all pages."""
    with requests.Session() as session:
        pages = walk_pages(session, url + "/plants?limit=1000", bearer(token),
                           most_pages=10_000, timeout=10)
    return [plant["name"] for page in pages for plant in page]


@pytest.mark.slow
def test_after_sigkill_mid_burst_every_200_plant_is_listed_and_its_event_delivered(
        runner, alice, database_url, gunicorn_server, make_receiver):
    receiver = make_receiver(Answer(503))  # down: every event must wait for a worker
    _, secret = subscribe(runner, receiver.url)
    env = plantstore_env(database_url, **CRASH_SETTINGS)
    server = gunicorn_server(workers=2, env=env)
    answered_200 = create_until_sigkilled(server, alice, ANSWERED_BEFORE_KILL,
                                          lambda plant_id: f"plant {plant_id}",
                                          seconds=30, clients=CLIENTS)
    assert len(answered_200) >= ANSWERED_BEFORE_KILL, server.output()[-3000:]

    restarted = gunicorn_server(workers=2, env=env)
    names = set(listed_names(restarted.url, alice))
    assert {f"plant {plant_id}" for plant_id in answered_200} <= names

    receiver.answer = Answer(200)
    wait_for_leases_to_run_out()  # held at the kill
    probe_at = Subscription.get().breaker_probe_at
    if probe_at is not None:  # the breaker opened: its probe is due
        sleep_until(probe_at)
    # The worker gets the default timeouts: its own attempts must not time
    # out on a busy machine, or they would wait for a later run.
    worker_env = {**os.environ, **env, "PLANTSTORE_WEBHOOK_CONNECT_TIMEOUT": "2",
                  "PLANTSTORE_WEBHOOK_READ_TIMEOUT": "5"}
    worker = run_plantstore("worker", "--once", env=worker_env, timeout=120)
    assert worker.returncode == 0, worker.stderr

    delivered = {}
    for got, answer in zip(receiver.requests, receiver.answers):
        if answer.status == 200:
            event = verify(secret, got)
            delivered[event["id"]] = event
    for plant_id in answered_200:
        assert delivered.get(plant_id) == {"id": plant_id, "name": f"plant {plant_id}"}
    # Plants committed but cut off before their 200 are announced too.
    assert {int(name.split()[1]) for name in names} <= set(delivered)
