"""Idempotency-Key on POST /plants: replay, mismatch, in flight, per user,
expiry and purge; against gunicorn with a receiver counting webhook events."""
import concurrent.futures
import datetime
import json
import time

import pytest
import requests

from helpers import assert_error, bearer
from plantstore.idempotency import purge_expired_keys
from plantstore.models import IdempotencyKey, Plant
from plugins.webhooks import subscribe


def keyed(token, key):
    return {**bearer(token), "Idempotency-Key": key}


def _plants(app):
    with app.app_context():
        return sorted(Plant.select(Plant.id).tuples())


@pytest.mark.parametrize("key", ["", " ", "x" * 256, "caf\u00e9", "tab\there", " padded"])
def test_a_malformed_key_is_400(client, alice, key):
    headers = {**bearer(alice), "Idempotency-Key": key.encode().decode("latin-1")}
    response = client.post("/plants", headers=headers, json={"id": 1, "name": "x"})
    body = assert_error(response, 400)
    assert "Idempotency-Key" in body["details"]


@pytest.mark.parametrize("key", ["k", "x" * 255, "8e03978e-40d5-43e8-bc93-6894a57f9324",
                                 '"quoted form"', "~!@#$%^&*()_+ inner spaces ok"])
def test_a_well_formed_key_is_replayed(client, alice, key):
    first = client.post("/plants", headers=keyed(alice, key), json={"id": 1, "name": "x"})
    again = client.post("/plants", headers=keyed(alice, key), json={"id": 1, "name": "x"})
    assert first.status_code == again.status_code == 200
    assert again.get_json() == first.get_json() == {"name": "x"}
    assert "Idempotent-Replayed" not in first.headers
    assert again.headers["Idempotent-Replayed"] == "true"


def test_the_same_key_with_another_body_is_422(client, alice):
    client.post("/plants", headers=keyed(alice, "k"), json={"id": 1, "name": "x"})
    response = client.post("/plants", headers=keyed(alice, "k"), json={"id": 2, "name": "x"})
    assert_error(response, 422)


def test_unknown_fields_do_not_make_a_body_different(client, alice):
    client.post("/plants", headers=keyed(alice, "k"), json={"id": 1, "name": "x"})
    again = client.post("/plants", headers=keyed(alice, "k"),
                        json={"name": "x", "id": 1, "ignored": True})
    assert again.headers["Idempotent-Replayed"] == "true"


def test_keys_belong_to_their_user(client, alice, bob):
    client.post("/plants", headers=keyed(alice, "k"), json={"id": 1, "name": "x"})
    # Bob's key "k" is his own: his create runs, and meets alice's plant.
    assert_error(client.post("/plants", headers=keyed(bob, "k"),
                             json={"id": 1, "name": "x"}), 409)
    assert client.post("/plants", headers=keyed(bob, "k"),
                       json={"id": 2, "name": "x"}).status_code == 200


def test_a_failed_request_leaves_its_key_free(client, alice, bob):
    client.post("/plants", headers=bearer(bob), json={"id": 1, "name": "bob's"})
    assert_error(client.post("/plants", headers=keyed(alice, "k"),
                             json={"id": 1, "name": "x"}), 409)
    client.delete("/plants/1", headers=bearer(bob))
    retried = client.post("/plants", headers=keyed(alice, "k"), json={"id": 1, "name": "x"})
    assert retried.status_code == 200
    assert "Idempotent-Replayed" not in retried.headers


def test_without_a_key_nothing_is_remembered(app, client, alice):
    assert client.post("/plants", headers=bearer(alice), json={"id": 1, "name": "x"}).status_code == 200
    assert_error(client.post("/plants", headers=bearer(alice), json={"id": 1, "name": "x"}), 409)
    with app.app_context():
        assert IdempotencyKey.select().count() == 0


def _expire_all(app):
    with app.app_context():
        past = datetime.datetime(2000, 1, 1)
        IdempotencyKey.update(expires_at=past).execute()


def test_an_expired_key_is_forgotten(app, client, alice):
    client.post("/plants", headers=keyed(alice, "k"), json={"id": 1, "name": "x"})
    _expire_all(app)
    again = client.post("/plants", headers=keyed(alice, "k"), json={"id": 2, "name": "y"})
    assert again.status_code == 200 and "Idempotent-Replayed" not in again.headers


def test_expired_keys_are_purged_in_batches(app, client, alice):
    for n in range(5):
        client.post("/plants", headers=keyed(alice, f"k{n}"), json={"id": n, "name": "x"})
    client.post("/plants", headers=keyed(alice, "live"), json={"id": 9, "name": "x"})
    with app.app_context():
        IdempotencyKey.update(expires_at=datetime.datetime(2000, 1, 1)).where(
            IdempotencyKey.key != "live").execute()
        assert purge_expired_keys(batch_size=3) == 3
        assert purge_expired_keys(batch_size=3) == 2
        assert purge_expired_keys(batch_size=3) == 0
        assert [row.key for row in IdempotencyKey.select()] == ["live"]


def test_the_worker_purges_expired_keys(app, client, runner, alice):
    client.post("/plants", headers=keyed(alice, "k"), json={"id": 1, "name": "x"})
    _expire_all(app)
    assert runner.invoke(args=["worker", "--once"]).exit_code == 0
    with app.app_context():
        assert IdempotencyKey.select().count() == 0


def test_the_document_shows_the_header_409_and_422(client):
    operation = client.get("/openapi.json").get_json()["paths"]["/plants"]["post"]
    header = next(p for p in operation["parameters"] if p["name"] == "Idempotency-Key")
    assert header["in"] == "header" and not header["required"]
    assert header["schema"]["maxLength"] == 255
    assert {"400", "409", "422"} <= operation["responses"].keys()


# --- real gunicorn (2 workers), a real receiver --------------------------------

def _post(server, token, key, plant):
    return requests.post(server.url + "/plants", headers=keyed(token, key),
                         json=plant, timeout=30)


def _assert_events(receiver, expected_ids, settle=1.0):
    """The receiver got exactly one event per id (waiting ``settle`` s for strays)."""
    receiver.wait_for(len(expected_ids))
    time.sleep(settle)
    got = sorted(json.loads(r.body)["id"] for r in receiver.requests)
    assert got == sorted(expected_ids)


@pytest.mark.slow
def test_a_retried_create_is_replayed_once_across_workers(
        app, gunicorn_server, runner, alice, make_receiver):
    receiver = make_receiver()
    subscribe(runner, receiver.url)
    server = gunicorn_server(workers=2)
    first = _post(server, alice, "retry-1", {"id": 1, "name": "fern", "tag": "green"})
    replays = [_post(server, alice, "retry-1", {"id": 1, "name": "fern", "tag": "green"})
               for _ in range(4)]
    assert first.status_code == 200 and "Idempotent-Replayed" not in first.headers
    for replay in replays:
        assert (replay.status_code, replay.content) == (200, first.content)
        assert replay.headers["Idempotent-Replayed"] == "true"
    mismatch = _post(server, alice, "retry-1", {"id": 1, "name": "ivy"})
    assert mismatch.status_code == 422 and mismatch.json()["error"] == 422
    _assert_events(receiver, [1])
    assert _plants(app) == [(1,)]


def test_a_key_in_flight_is_409_until_its_request_answers_then_replayed(
        app, client, alice):
    """A key whose request has claimed it and not yet stored its answer (the
    row as a request in progress holds it, in any process) is a 409 with
    Retry-After for the same request and a 422 for another; once the answer
    is stored, the same request is replayed."""
    plant = {"id": 7, "name": "slow"}
    first = client.post("/plants", headers=keyed(alice, "k"), json=plant)
    assert first.status_code == 200
    with app.app_context():
        answer = IdempotencyKey.get(IdempotencyKey.key == "k")
        in_progress = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None) \
            + datetime.timedelta(seconds=60)
        IdempotencyKey.update(status=None, locked_until=in_progress).where(
            IdempotencyKey.id == answer.id).execute()
    during = client.post("/plants", headers=keyed(alice, "k"), json=plant)
    assert_error(during, 409)
    assert during.headers["Retry-After"] == "1"
    assert_error(client.post("/plants", headers=keyed(alice, "k"),
                             json={"id": 8, "name": "other"}), 422)
    with app.app_context():
        IdempotencyKey.update(status=answer.status, locked_until=None).where(
            IdempotencyKey.id == answer.id).execute()
    after = client.post("/plants", headers=keyed(alice, "k"), json=plant)
    assert (after.status_code, after.data) == (200, first.data)
    assert after.headers["Idempotent-Replayed"] == "true"
    assert _plants(app) == [(7,)]


@pytest.mark.slow
def test_concurrent_requests_with_one_key_create_once(app, gunicorn_server, runner, alice,
                                                      make_receiver):
    receiver = make_receiver()
    subscribe(runner, receiver.url)
    server = gunicorn_server(workers=2)
    plants = {key: {"id": n, "name": key} for n, key in enumerate(["a", "b", "c"], 1)}
    jobs = [key for key in plants for _ in range(4)]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda key: (key, _post(server, alice, key, plants[key])),
                                jobs))
    for key in plants:
        mine = [answer for k, answer in answers if k == key]
        assert {answer.status_code for answer in mine} <= {200, 409}
        fresh = [a for a in mine if a.status_code == 200
                 and "Idempotent-Replayed" not in a.headers]
        assert len(fresh) == 1, [(a.status_code, a.headers) for a in mine]
    _assert_events(receiver, [1, 2, 3])
    assert _plants(app) == [(1,), (2,), (3,)]
