"""Nothing lost on a crash: SIGKILL of the whole gunicorn process group in
the middle of a burst of creates, while the webhook receiver is failing.

After a restart, every plant whose create was answered 200 is listed by
the API, and one ``plantstore worker --once`` run (a fresh process) brings
each of their "New Plant" events to the receiver, signed.
"""
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urljoin

import pytest
import requests

from conftest import REPO, bearer
from webhook_helpers import (Answer, create_until_sigkilled, make_receiver,  # noqa: F401
                             subscribe, verify)

PLANTSTORE = str(Path(sys.executable).with_name("plantstore"))
# Short send timeouts and a retry due at once; leases as short as allowed.
# The receiver is down during the burst, so its breaker opens; its probe is
# due by the time the worker runs.
WEBHOOK_SETTINGS = {"WEBHOOK_CONNECT_TIMEOUT": 0.5, "WEBHOOK_READ_TIMEOUT": 0.5,
                    "WEBHOOK_LEASE_SECONDS": 2, "WEBHOOK_RETRY_SCHEDULE": "0,0,0",
                    "WEBHOOK_BREAKER_COOLDOWN": 1}
CLIENTS = 4
ANSWERED_BEFORE_KILL = 60
LINK_NEXT = re.compile(r'<([^>]*)>; rel="next"')


@pytest.fixture
def app_config():
    return dict(WEBHOOK_SETTINGS)


def plantstore_env(database_url):
    """The environment of a server or worker process on the test's database."""
    return {"PLANTSTORE_DATABASE_URL": database_url,
            **{f"PLANTSTORE_{key}": str(value) for key, value in WEBHOOK_SETTINGS.items()}}


def listed_names(url, token):
    """Every plant name the API lists for ``token``, walking all pages."""
    names, next_url = [], url + "/plants?limit=1000"
    with requests.Session() as session:
        while next_url:
            response = session.get(next_url, headers=bearer(token), timeout=10)
            assert response.status_code == 200, response.text
            names += [plant["name"] for plant in response.json()]
            link = response.headers.get("Link")
            next_url = link and urljoin(url, LINK_NEXT.fullmatch(link).group(1))
    return names


@pytest.mark.slow
def test_after_sigkill_mid_burst_every_200_plant_is_listed_and_its_event_delivered(
        runner, alice, database_url, gunicorn_server, make_receiver):  # noqa: F811
    receiver = make_receiver(Answer(503))  # down: every event must wait for a worker
    _, secret = subscribe(runner, receiver.url)
    env = plantstore_env(database_url)
    server = gunicorn_server(workers=2, env=env)
    answered_200 = create_until_sigkilled(server, alice, ANSWERED_BEFORE_KILL,
                                          lambda plant_id: f"plant {plant_id}",
                                          seconds=30, clients=CLIENTS)
    assert len(answered_200) >= ANSWERED_BEFORE_KILL, server.output()[-3000:]

    restarted = gunicorn_server(workers=2, env=env)
    names = set(listed_names(restarted.url, alice))
    assert {f"plant {plant_id}" for plant_id in answered_200} <= names

    receiver.answer = Answer(200)
    time.sleep(WEBHOOK_SETTINGS["WEBHOOK_LEASE_SECONDS"] + 0.1)  # leases held at the kill
    # The worker gets the default timeouts: its own attempts must not time
    # out on a busy machine, or they would wait for a later run.
    worker_env = {**os.environ, **env, "PLANTSTORE_WEBHOOK_CONNECT_TIMEOUT": "2",
                  "PLANTSTORE_WEBHOOK_READ_TIMEOUT": "5"}
    worker = subprocess.run([PLANTSTORE, "worker", "--once"], cwd=REPO, timeout=120,
                            env=worker_env, capture_output=True, text=True)
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
