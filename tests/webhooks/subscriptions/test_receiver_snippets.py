"""docs/webhooks.md's receiver code for real: its Flask receiver runs as
written, as a process of its own, and verifies a real delivery from
plantstore; its by-hand check agrees with plantstore's signatures, rotated
ones included."""
import base64
import datetime
import json
import secrets
import sys
import time

import pytest
import requests
from standardwebhooks import Webhook

from helpers import bearer, free_port, wait_until
from plantstore.db.models import Delivery
from plugins.local_run import code_blocks
from plugins.webhooks import PATIENT_SENDS, subscribe

pytestmark = [pytest.mark.slow, pytest.mark.app_config(PATIENT_SENDS)]

SECTION = "## Verifying the signature"


def documented_snippets():
    """The section's two Python blocks: the by-hand check and the receiver."""
    by_hand, receiver = code_blocks("webhooks.md", SECTION, "python")
    assert "def signature_matches" in by_hand and "app = Flask(" in receiver
    return by_hand, receiver


def another_secret():
    """A signing secret plantstore never issued."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def signed(secret, message_id, body):
    """Standard Webhooks headers signing ``body`` with ``secret`` now."""
    now = datetime.datetime.fromtimestamp(int(time.time()), datetime.timezone.utc)
    return {"webhook-id": message_id, "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": Webhook(secret).sign(message_id, now, body),
            "Content-Type": "application/json"}


def test_the_flask_receiver_runs_as_written_and_verifies_a_real_delivery(
        tmp_path, background, runner, gunicorn_server, app, alice):
    _, receiver_code = documented_snippets()
    (tmp_path / "receiver.py").write_text(receiver_code)
    port = free_port()
    subscription_id, secret = subscribe(runner, f"http://127.0.0.1:{port}/plants")
    receiver = background(f"exec {sys.executable} receiver.py", tmp_path,
                          {"PATH": "/usr/bin:/bin", "PORT": str(port),
                           "PLANTSTORE_WEBHOOK_SECRET": secret})
    receiver.wait_for_output(rf"Running on http://127\.0\.0\.1:{port}")
    server = gunicorn_server(workers=1)

    created = requests.post(server.url + "/plants", headers=bearer(alice), timeout=10,
                            json={"id": 5, "name": "Fern", "tag": "green"})
    assert created.status_code == 200
    receiver.wait_for_output(r"new plant: \{'id': 5, 'name': 'Fern', 'tag': 'green'\}")

    def delivered():
        with app.app_context():
            return Delivery.get(Delivery.subscription == subscription_id).status == "delivered"
    wait_until(delivered, timeout=30, message="the delivery to be recorded delivered")

    url = f"http://127.0.0.1:{port}/plants"
    body = json.dumps({"id": 6, "name": "Moss"})
    forged = requests.post(url, data=body, timeout=10,
                           headers=signed(another_secret(), "msg_forged", body))
    assert forged.status_code == 400
    first = requests.post(url, data=body, headers=signed(secret, "msg_twice", body), timeout=10)
    again = requests.post(url, data=body, headers=signed(secret, "msg_twice", body), timeout=10)
    assert (first.status_code, again.status_code) == (204, 204)
    assert receiver.output().count("new plant: {'id': 6, 'name': 'Moss'}") == 1
    assert "msg_forged" not in receiver.output() and "'id': 6" in receiver.output()


def test_the_by_hand_check_agrees_with_plantstores_signatures_also_rotated(
        make_receiver, runner, gunicorn_server, alice):
    by_hand, _ = documented_snippets()
    namespace = {}
    exec(compile(by_hand, "docs/webhooks.md", "exec"), namespace)
    signature_matches = namespace["signature_matches"]
    receiver = make_receiver()
    subscription_id, first_secret = subscribe(runner, receiver.url)
    server = gunicorn_server(workers=1)

    assert requests.post(server.url + "/plants", json={"id": 1, "name": "Fern"},
                         headers=bearer(alice), timeout=10).status_code == 200
    (received,) = receiver.wait_for(1)
    assert signature_matches(first_secret, received.headers, received.body)
    assert not signature_matches(another_secret(), received.headers, received.body)
    assert not signature_matches(first_secret, received.headers, received.body + b" ")

    rotated = runner.invoke(args=["webhooks", "rotate-secret", str(subscription_id)])
    assert rotated.exit_code == 0, rotated.output
    second_secret = rotated.stdout.strip()
    assert requests.post(server.url + "/plants", json={"id": 2, "name": "Moss"},
                         headers=bearer(alice), timeout=10).status_code == 200
    _, received = receiver.wait_for(2)
    assert len(received.headers["webhook-signature"].split(" ")) == 2
    assert signature_matches(first_secret, received.headers, received.body)
    assert signature_matches(second_secret, received.headers, received.body)
    assert not signature_matches(another_secret(), received.headers, received.body)
