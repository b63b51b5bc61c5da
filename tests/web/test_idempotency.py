"""Idempotency-Key on POST /plants: replay, mismatch, per user, expiry and
purge; who holds a key (the statement or transaction of its request: a
duplicate meanwhile, another holder, a killed holder) and the database's
clock; against gunicorn with a receiver counting webhook events."""
import concurrent.futures
import datetime
import json
import signal
import subprocess
import sys
import threading
import time

import psycopg2
import pytest
import requests

from helpers import POSTGRES_URL, REPO, assert_error, bearer, skew_process_clock, wait_until
from plantstore import db
from plantstore.db.models import IdempotencyKey, Plant, User
from plantstore.web import idempotency
from plantstore.web.idempotency_keys import purge_expired_keys
from plugins.stalls import waiting_on_a_lock
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
    created = client.post("/plants", headers=bearer(alice), json={"id": 1, "name": "x"})
    assert created.status_code == 200
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


# --- who holds a key: the statement or transaction of its request ------------------------

postgres_only = pytest.mark.skipif(
    not POSTGRES_URL, reason="SQLite's write transactions take turns: nothing runs "
                             "beside the transaction holding a key")
sqlite_only = pytest.mark.skipif(bool(POSTGRES_URL), reason="SQLite's turn-taking")
postgres_clock_only = pytest.mark.skipif(
    not POSTGRES_URL, reason="SQLite serves one host: its clock is the process's")


@pytest.fixture
def held_create(app, monkeypatch):
    """Start a keyed create in a thread and stop it inside its transaction
    (SQLite: on PostgreSQL a create is one statement, see ``stalled_writes``),
    its plant and key inserted and its answer not yet stored; the returned
    ``release()`` lets it finish and gives its response. Released at the
    end of the test whatever happened."""
    inside, released = threading.Event(), threading.Event()
    store_answer = idempotency.store_answer

    def store_answer_when_released(row_id, response):
        if not inside.is_set():  # only the first request's
            inside.set()
            assert released.wait(timeout=60), "the held create was never released"
        store_answer(row_id, response)
    monkeypatch.setattr(idempotency, "store_answer", store_answer_when_released)
    pool = concurrent.futures.ThreadPoolExecutor(1)

    def start(token, key, plant):
        first = pool.submit(app.test_client().post, "/plants",
                            headers=keyed(token, key), json=plant)
        wait_until(lambda: inside.is_set() or first.done(),
                   message="the first create to be in its transaction")
        assert inside.is_set(), first.result().data

        def release():
            released.set()
            return first.result(timeout=60)
        return release
    yield start
    released.set()
    pool.shutdown(wait=True)


def _post_within(app, token, key, plant, seconds=30):
    """POST from another thread, failing the test if no answer comes within
    ``seconds`` (a request waiting on a held key must not wait unbounded)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        answer = pool.submit(app.test_client().post, "/plants",
                             headers=keyed(token, key), json=plant)
        return answer.result(timeout=seconds)


@postgres_only
def test_a_duplicate_while_the_first_is_in_its_statement_is_409_at_once_then_replayed(
        app, client, alice, stalled_writes):
    """The key's advisory lock is tried, never waited for: a second request
    with the key, whatever its body, gets the 409 with Retry-After while the
    first is still in its statement; once that commits, the same request
    is replayed and another body is a 422."""
    plant = {"id": 7, "name": "slow"}
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        first = pool.submit(app.test_client().post, "/plants",
                            headers=keyed(alice, "k"), json=plant)
        wait_until(lambda: waiting_on_a_lock(app) or first.done(),
                   message="the first create to wait inside its statement")
        assert not first.done(), first.result().data
        for body in (plant, {"id": 8, "name": "other"}):
            during = _post_within(app, alice, "k", body)
            assert_error(during, 409)
            assert during.headers["Retry-After"] == "1"
        stalled_writes()
        first = first.result(timeout=60)
    assert first.status_code == 200 and "Idempotent-Replayed" not in first.headers
    after = client.post("/plants", headers=keyed(alice, "k"), json=plant)
    assert (after.status_code, after.data) == (200, first.data)
    assert after.headers["Idempotent-Replayed"] == "true"
    assert_error(client.post("/plants", headers=keyed(alice, "k"),
                             json={"id": 8, "name": "other"}), 422)
    assert _plants(app) == [(7,)]


@sqlite_only
def test_on_sqlite_a_duplicate_takes_its_turn_and_is_replayed(app, alice, held_create):
    """The transaction holding the key holds SQLite's write lock: a second
    request with the key (sent while the first holds it, or just after)
    runs once the first has committed, and gets its answer."""
    plant = {"id": 7, "name": "slow"}
    release = held_create(alice, "k", plant)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        duplicate = pool.submit(app.test_client().post, "/plants",
                                headers=keyed(alice, "k"), json=plant)
        first = release()
        again = duplicate.result(timeout=60)
    assert first.status_code == 200 and "Idempotent-Replayed" not in first.headers
    assert (again.status_code, again.data) == (200, first.data)
    assert again.headers["Idempotent-Replayed"] == "true"
    assert _plants(app) == [(7,)]


@postgres_only
def test_a_stored_answer_is_replayed_whatever_else_holds_the_key(app, client, alice):
    """Another transaction holding the key's lock (a request in progress, or
    the connection of a process the database has not yet seen die) makes a
    key without an answer a 409, and changes nothing for a key with one:
    its answer is replayed, and another body is a 422."""
    plant = {"id": 1, "name": "fern"}
    first = client.post("/plants", headers=keyed(alice, "answered"), json=plant)
    assert first.status_code == 200
    with app.app_context():
        alice_id = User.get(User.name == "alice").id
    holder = psycopg2.connect(POSTGRES_URL)
    try:
        with holder.cursor() as cursor:  # a transaction stays open until rollback
            for key in ("answered", "unanswered"):
                cursor.execute("SELECT pg_advisory_xact_lock("
                               "plantstore_idempotency_key_lock(%s, %s))", (alice_id, key))
        replayed = _post_within(app, alice, "answered", plant)
        assert (replayed.status_code, replayed.data) == (200, first.data)
        assert replayed.headers["Idempotent-Replayed"] == "true"
        assert_error(_post_within(app, alice, "answered", {"id": 2, "name": "moss"}), 422)
        held = _post_within(app, alice, "unanswered", {"id": 3, "name": "ivy"})
        assert_error(held, 409)
        assert held.headers["Retry-After"] == "1"
    finally:
        holder.rollback()
        holder.close()
    assert client.post("/plants", headers=keyed(alice, "unanswered"),
                       json={"id": 3, "name": "ivy"}).status_code == 200
    assert _plants(app) == [(1,), (3,)]


# Run by a separate Python process: a keyed create through the real app. On
# SQLite it stops inside its transaction (plant and key inserted, nothing
# committed) and says "holding" on stdout; on PostgreSQL its statement runs
# in the database (see ``stalled_writes``). Either way it waits to be killed.
HOLDER = r"""
import json, sys, threading
from plantstore import create_app
from plantstore.web import idempotency

url, token, key, plant = sys.argv[1:5]


def hold(row_id, response):
    print("holding", flush=True)
    threading.Event().wait(timeout=120)
    sys.exit("the holder was not killed")


idempotency.store_answer = hold
app = create_app({"DATABASE_URL": url})
app.test_client().post("/plants", json=json.loads(plant), headers={
    "Authorization": f"Bearer {token}", "Idempotency-Key": key})
sys.exit("the holder's create ended")
"""


def _start_holder(database_url, token, plant):
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, database_url, token, "k", json.dumps(plant)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)


def _kill(holder):
    holder.kill()
    holder.wait(timeout=30)
    assert holder.returncode == -signal.SIGKILL


@sqlite_only
def test_a_key_held_by_a_killed_process_is_free_once_its_transaction_is_gone(
        app, client, database_url, alice):
    """SIGKILL a process in the middle of a keyed create: its transaction
    (the key's row, the uncommitted plant) ends with it, and a retry with
    the key runs as the first, creating the plant once; the retry's answer
    is then replayed."""
    plant = {"id": 5, "name": "fern"}
    holder = _start_holder(database_url, alice, plant)
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            said = pool.submit(holder.stdout.readline).result(timeout=60)
        assert said == "holding\n", (said, holder.poll(), holder.stderr.read())
    finally:
        _kill(holder)
    retried = client.post("/plants", headers=keyed(alice, "k"), json=plant)
    assert retried.status_code == 200, retried.data
    assert "Idempotent-Replayed" not in retried.headers
    again = client.post("/plants", headers=keyed(alice, "k"), json=plant)
    assert (again.status_code, again.data) == (200, retried.data)
    assert again.headers["Idempotent-Replayed"] == "true"
    assert _plants(app) == [(5,)]


@postgres_only
def test_a_killed_process_s_keyed_create_answers_its_key_with_what_its_statement_did(
        app, client, database_url, alice, stalled_writes):
    """SIGKILL a process whose keyed create is running in the database: the
    key stays held only by that statement (a retry meanwhile is a 409 at
    once), and once the statement ends the retry gets its answer, replayed;
    the plant exists once."""
    plant = {"id": 5, "name": "fern"}
    holder = _start_holder(database_url, alice, plant)
    try:
        wait_until(lambda: waiting_on_a_lock(app) or holder.poll() is not None,
                   timeout=60, message="the holder's create to wait inside its statement")
        assert holder.poll() is None, holder.stderr.read()
    finally:
        _kill(holder)
    assert_error(_post_within(app, alice, "k", plant), 409)
    stalled_writes()
    wait_until(lambda: _plants(app) == [(5,)], timeout=60,
               message="the killed holder's statement to commit")
    retried = client.post("/plants", headers=keyed(alice, "k"), json=plant)
    assert (retried.status_code, retried.json) == (200, {"name": "fern"})
    assert retried.headers["Idempotent-Replayed"] == "true"
    assert _plants(app) == [(5,)]


# --- the database's clock ------------------------------------------------------

@postgres_clock_only
def test_key_expiry_is_the_databases_time_not_the_process_clock(app, client, alice,
                                                                 monkeypatch):
    """A process whose clock runs two days ahead (past the 24 h time to live)
    stores a key good for 24 h by the database's clock, replays it, and its
    purge deletes nothing."""
    skew_process_clock(monkeypatch, datetime.timedelta(days=2))
    plant = {"id": 1, "name": "x"}
    first = client.post("/plants", headers=keyed(alice, "k"), json=plant)
    with app.app_context():
        [(ttl_left,)] = db.database.execute_sql(
            "SELECT extract(epoch FROM expires_at - (now() AT TIME ZONE 'UTC')) "
            "FROM idempotency_key").fetchall()
        assert 24 * 3600 - 60 < ttl_left <= 24 * 3600
        assert purge_expired_keys() == 0
    again = client.post("/plants", headers=keyed(alice, "k"), json=plant)
    assert (again.status_code, again.data) == (200, first.data)
    assert again.headers["Idempotent-Replayed"] == "true"


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
