"""The OWASP API Security Top 10 (2023), the categories that apply, as attacks.

- API1 broken object-level authorization: another user's plants can be
  neither listed, deleted nor told apart from unknown ones; an admin's can.
- API2 broken authentication: every bad credential is the same 401, a token
  is taken only from the Authorization header, and no token reaches a log.
- API3 broken object-property-level authorization (mass assignment): fields
  the client may not set are never stored or honoured.
- API4 unrestricted resource consumption: oversized, deep or numerous input
  is a clean 4xx in the contract's shape and the worker lives on.
- API7 server-side request forgery: receivers are set by operators only,
  redirects are never followed and answers are read up to a cap.
"""
import json
import logging
import re
import socket
import time
from datetime import timedelta

import pytest
import requests

from helpers import assert_error, bearer, headers_but_request_id, listed, post_plant
from plantstore.db.models import Attempt, Delivery, Plant, Subscription, Token, User, utcnow
from plantstore.web.auth import digest, revoke_token
from plugins.webhooks import (
    RETRY_EVERY_SECOND,
    Answer,
    run_worker,
    sleep_until,
    subscribe,
    wait_for_attempts,
)

NEW_PLANT = {"id": 7, "name": "fern", "tag": "green"}
pytestmark = pytest.mark.app_config(RETRY_EVERY_SECOND)


def retry_now(runner):
    """Wait for the create's attempt to be recorded and its retry to fall
    due, then let ``plantstore worker --once`` make it."""
    wait_for_attempts(1)
    sleep_until(Delivery.get().next_attempt_at)
    run_worker(runner)


def comparable(response):
    """Status, body and headers of an answer, less its per-request id."""
    return response.status_code, response.get_data(), headers_but_request_id(response)


# --- API1: object-level authorization ---------------------------------------

def test_api1_another_users_plants_are_not_listed(client, alice, bob):
    assert post_plant(client, alice, NEW_PLANT).status_code == 200
    assert listed(client, bob) == []
    assert listed(client, bob, "?after=0&limit=1000") == []
    assert listed(client, alice) == [{"name": "fern", "tag": "green"}]


def test_api1_deleting_another_users_plant_is_the_404_of_an_unknown_id(client, alice, bob):
    assert post_plant(client, alice, NEW_PLANT).status_code == 200

    taken = client.delete("/plants/7", headers=bearer(bob))
    unknown = client.delete("/plants/8", headers=bearer(bob))

    assert_error(taken, 404)
    # The same answer but for the id the client itself sent.
    assert comparable(taken)[0] == comparable(unknown)[0]
    assert taken.get_data().replace(b"7", b"8") == unknown.get_data()
    assert comparable(taken)[2] == comparable(unknown)[2]
    assert listed(client, alice) == [{"name": "fern", "tag": "green"}]


def test_api1_a_taken_id_reveals_neither_its_owner_nor_its_plant(client, alice, bob):
    """Ids are global and client-chosen (SPEC §1), so a create of a taken id
    is a 409; that answer is the same whoever holds the id."""
    assert post_plant(client, alice, NEW_PLANT).status_code == 200
    assert post_plant(client, bob, {"id": 8, "name": "moss"}).status_code == 200

    on_alices = post_plant(client, bob, {"id": 7, "name": "probe"})
    on_own = post_plant(client, bob, {"id": 8, "name": "probe"})

    body = assert_error(on_alices, 409)
    assert "fern" not in body["message"] and "green" not in body["message"]
    assert "alice" not in on_alices.get_data(as_text=True)
    assert on_alices.get_data().replace(b"7", b"8") == on_own.get_data()
    assert listed(client, alice) == [{"name": "fern", "tag": "green"}]


def test_api1_admin_lists_and_deletes_every_users_plants(client, alice, bob, admin):
    assert post_plant(client, alice, NEW_PLANT).status_code == 200
    assert post_plant(client, bob, {"id": 3, "name": "moss"}).status_code == 200

    assert listed(client, admin) == [{"name": "moss"}, {"name": "fern", "tag": "green"}]
    assert client.delete("/plants/7", headers=bearer(admin)).status_code == 204
    assert client.delete("/plants/3", headers=bearer(admin)).status_code == 204
    assert listed(client, alice) == [] and listed(client, bob) == []


# --- API2: authentication ----------------------------------------------------

def _revoked(app, make_token):
    secret = make_token("alice")
    with app.app_context():
        revoke_token(Token.get(Token.digest == digest(secret)).id)
    return secret


def _expired(app, make_token):
    secret = make_token("alice", expires_in_days=1)
    with app.app_context():
        (Token.update(expires_at=utcnow() - timedelta(seconds=1))
         .where(Token.digest == digest(secret)).execute())
    return secret


def _of_deleted_user(app, make_token):
    secret = make_token("carol")
    result = app.test_cli_runner().invoke(args=["users", "delete", "carol"])
    assert result.exit_code == 0, result.output
    return secret


BAD_CREDENTIALS = {
    "scheme only": lambda app, make_token: "Bearer",
    "two spaces": lambda app, make_token: "bearer  " + make_token("alice"),
    "basic": lambda app, make_token: "Basic YWxpY2U6c2VjcmV0",
    "unknown": lambda app, make_token: "Bearer pst_" + "A" * 43,
    "revoked": lambda app, make_token: "Bearer " + _revoked(app, make_token),
    "expired": lambda app, make_token: "Bearer " + _expired(app, make_token),
    "deleted user": lambda app, make_token: "Bearer " + _of_deleted_user(app, make_token),
}


@pytest.mark.parametrize("method, path, body", [
    pytest.param("GET", "/plants", None, id="list"),
    pytest.param("POST", "/plants", NEW_PLANT, id="create"),
    pytest.param("DELETE", "/plants/7", None, id="delete"),
])
def test_api2_every_bad_credential_gets_one_indistinguishable_401(
        app, client, make_token, method, path, body):
    """Malformed, unknown, revoked, expired or orphaned: an attacker cannot
    tell which from the answer, so it leaks nothing about a token's state."""
    answers = {}
    for name, authorization in BAD_CREDENTIALS.items():
        header = authorization(app, make_token)
        answers[name] = client.open(path, method=method, json=body,
                                    headers={"Authorization": header})
    for name, response in answers.items():
        assert_error(response, 401)
        assert response.headers["WWW-Authenticate"] == \
            'Bearer realm="plantstore", error="invalid_token"', name
    assert len({comparable(response) for response in answers.values()}) == 1
    with app.app_context():
        assert Plant.select().count() == 0


@pytest.mark.parametrize("where", ["query", "form body"])
def test_api2_a_token_outside_the_authorization_header_is_never_accepted(client, alice, where):
    if where == "query":
        response = client.get(f"/plants?access_token={alice}")
    else:
        response = client.post("/plants", data={"access_token": alice, "id": "7",
                                                "name": "fern"})
    assert_error(response, 401)
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="plantstore"'


def test_api2_no_token_reaches_the_application_log(app, client, alice, make_token, caplog):
    revoked = _revoked(app, make_token)
    caplog.set_level(logging.DEBUG)
    client.get("/plants", headers=bearer(alice))
    post_plant(client, alice, NEW_PLANT)
    client.get(f"/plants?access_token={alice}")
    client.get("/plants", headers=bearer(revoked))
    client.delete(f"/plants/{alice}", headers=bearer(alice))
    client.get("/plants", headers={"Authorization": f"Bearer {alice} extra"})

    logged = "\n".join(record.getMessage() + str(record.args) for record in caplog.records)
    logged += caplog.text
    for token in (alice, revoked):
        assert token not in logged and token[4:] not in logged


@pytest.mark.slow
def test_api2_no_token_reaches_gunicorns_log_even_from_a_refused_request_line(
        gunicorn_server, alice):
    """gunicorn logs the request line of HTTP it cannot parse; a token in it
    must be masked like everywhere else."""
    server = gunicorn_server(workers=1)
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(f"GET /plants?access_token={alice} HTTP/1.1 junk\r\n"
                     f"Host: x\r\n\r\n".encode())
        answer = sock.recv(65536).decode()
    assert answer.startswith("HTTP/1.1 400 ")
    assert '"error": 400' in answer
    requests.get(server.url + f"/plants?access_token={alice}", timeout=5)
    requests.get(server.url + "/plants", headers=bearer(alice), timeout=5)
    server.stop()

    output = server.output()
    assert "Invalid" in output  # gunicorn did log the refused request
    assert alice not in output and alice[4:] not in output


# --- API3: mass assignment ---------------------------------------------------

def test_api3_owner_and_privilege_fields_in_a_create_are_ignored(app, client, alice, bob):
    with app.app_context():
        bob_id = User.get(User.name == "bob").id
    body = {**NEW_PLANT, "owner": bob_id, "owner_id": bob_id, "user_id": bob_id,
            "user": "bob", "admin": True, "is_admin": True, "role": "admin",
            "scopes": ["plants:read"], "created_at": "1970-01-01T00:00:00"}

    response = client.post("/plants?owner=2&admin=true", json=body,
                           headers={**bearer(alice), "X-User-Id": str(bob_id)})

    assert response.status_code == 200
    assert response.get_json() == {"name": "fern", "tag": "green"}
    assert listed(client, bob) == []
    assert listed(client, alice) == [{"name": "fern", "tag": "green"}]
    with app.app_context():
        plant = Plant.get_by_id(7)
        alice_row = User.get(User.name == "alice")
        assert plant.owner_id == alice_row.id
        assert plant.created_at.year > 1970
        assert not alice_row.is_admin


def test_api3_a_create_never_makes_its_caller_an_admin(client, alice, bob):
    assert post_plant(client, bob, {"id": 1, "name": "moss"}).status_code == 200
    assert post_plant(client, alice, {**NEW_PLANT, "admin": True, "is_admin": True}
                  ).status_code == 200
    assert listed(client, alice) == [{"name": "fern", "tag": "green"}]
    assert_error(client.delete("/plants/1", headers=bearer(alice)), 404)


@pytest.mark.parametrize("trick", [
    pytest.param({"id": "8"}, id="id as a string"),
    pytest.param({"id": {"$gt": 0}}, id="id as an operator object"),
    pytest.param({"id": [7, 8]}, id="id as a list"),
    pytest.param({"id": True}, id="id as a boolean"),
    pytest.param({"id": None}, id="null id"),
])
def test_api3_id_tricks_are_refused_and_store_nothing(app, client, alice, trick):
    error = assert_error(post_plant(client, alice, {**NEW_PLANT, **trick}), 400)
    assert "id" in error["details"]
    with app.app_context():
        assert Plant.select().count() == 0


def test_api3_an_unknown_capitalised_id_key_does_not_pick_the_id(app, client, alice):
    assert post_plant(client, alice, {**NEW_PLANT, "ID": 99, "Id": 98}).status_code == 200
    with app.app_context():
        assert [plant.id for plant in Plant.select()] == [7]


# --- API4: resource consumption ----------------------------------------------

@pytest.mark.parametrize("limit", ["0", "-1", "1001", "2147483648", "9" * 5000])
def test_api4_a_limit_out_of_bounds_is_400_naming_limit(client, alice, limit):
    error = assert_error(client.get(f"/plants?limit={limit}", headers=bearer(alice)), 400)
    assert "limit" in error["details"]


def test_api4_the_largest_page_is_the_configured_maximum(client, alice):
    assert client.get("/plants?limit=1000", headers=bearer(alice)).status_code == 200


def _json_bytes(body):
    return json.dumps(body).encode()


# (name, body bytes, expected status, field the 400 names or None)
ABUSIVE_BODIES = [
    pytest.param(b"[" * 100_000, 400, "body", id="100k nested arrays"),
    pytest.param(b'{"a":' * 50_000 + b"1" + b"}" * 50_000, 400, "body",
                 id="50k nested objects"),
    pytest.param(b'{"id": ' + b"9" * 100_000 + b', "name": "fern"}', 400, "id",
                 id="100k-digit integer"),
    pytest.param(b'{"id": 1e999999999, "name": "fern"}', 400, "id", id="huge exponent"),
    pytest.param(_json_bytes({"id": 7, "name": "x" * 500_000}), 400, "name",
                 id="name of 500k characters"),
    pytest.param(_json_bytes({"id": 7, "name": "fern", "tag": "x" * 100_000}), 400, "tag",
                 id="tag of 100k characters"),
    pytest.param(b'{"id": 7, "name": "fern", "junk": [' + b"0," * 400_000 + b"0]}", 200,
                 None, id="800 KB of ignored fields"),
    pytest.param(b'{"id": 7, "name": "' + b"x" * (2 << 20) + b'"}', 413, None,
                 id="2 MiB body over the cap"),
]


@pytest.mark.parametrize("body, status, field", ABUSIVE_BODIES)
def test_api4_abusive_bodies_get_a_clean_answer(app, client, alice, body, status, field):
    started = time.monotonic()
    response = client.post("/plants", data=body, content_type="application/json",
                           headers=bearer(alice))
    assert time.monotonic() - started < 10
    if status == 200:
        assert response.status_code == 200 and response.get_json() == {"name": "fern"}
        return
    error = assert_error(response, status)
    if field:
        assert field in error["details"], error
    with app.app_context():
        assert Plant.select().count() == 0


@pytest.mark.slow
def test_api4_a_gunicorn_worker_survives_every_abuse_and_answers_in_json(
        gunicorn_server, alice):
    """One worker takes every abusive request in turn; after each, a normal
    request is served by it, and it is never replaced."""
    server = gunicorn_server(workers=1)
    auth = bearer(alice)
    # A connection of its own per attack: the server may close one after an
    # answer it gave without reading the whole body (413), and a reused one
    # would then fail the next attack at random.
    session = requests
    attacks = [
        (413, lambda: session.post(server.url + "/plants", headers=auth, timeout=10,
                                   json={"id": 1, "name": "x" * (2 << 20)})),
        (400, lambda: session.post(server.url + "/plants", timeout=10,
                                   headers={**auth, "Content-Type": "application/json"},
                                   data=b"[" * 100_000)),
        (400, lambda: session.post(server.url + "/plants", timeout=10,
                                   headers={**auth, "Content-Type": "application/json"},
                                   data=b'{"id": ' + b"9" * 100_000 + b', "name": "x"}')),
        (414, lambda: session.get(server.url + "/plants?limit=1&x=" + "a" * 10_000,
                                  headers=auth, timeout=10)),
        (431, lambda: session.get(server.url + "/plants", timeout=10, headers={
            **auth, **{f"X-Filler-{i}": "v" for i in range(150)}})),
        (431, lambda: session.get(server.url + "/plants", timeout=10,
                                  headers={**auth, "X-Huge": "v" * 20_000})),
        (400, lambda: session.get(server.url + "/plants?limit=" + "9" * 3000,
                                  headers=auth, timeout=10)),
    ]
    for number, (status, attack) in enumerate(attacks):
        response = attack()
        assert response.status_code == status, (number, response.text[:300])
        assert response.headers["Content-Type"].startswith("application/json"), number
        assert response.json()["error"] == status
        plant = {"id": number, "name": f"plant {number}"}
        follow_up = requests.post(server.url + "/plants", json=plant, headers=auth,
                                  timeout=10)
        assert follow_up.status_code == 200, (number, follow_up.text)
    listed_names = requests.get(server.url + "/plants", headers=auth, timeout=10).json()
    assert len(listed_names) == len(attacks)
    server.stop()
    assert len(re.findall(r"Booting worker", server.output())) == 1


# --- API7: server-side request forgery ---------------------------------------

def test_api7_only_post_webhooks_registers_one_and_never_for_an_internal_address(
        app, client, alice, admin):
    # The address policy itself is pinned in test_ssrf.py.
    refused = client.post("/webhooks", json={"url": "http://169.254.169.254/"},
                          headers=bearer(admin))
    assert "url" in assert_error(refused, 400)["details"]
    for path in ("/subscriptions", "/plant/webhook", "/plants/webhook"):
        assert client.post(path, json={"url": "http://169.254.169.254/"},
                           headers=bearer(admin)).status_code in (404, 405)
    body = {**NEW_PLANT, "webhook": "http://127.0.0.1:1/", "url": "http://127.0.0.1:1/",
            "callback_url": "http://127.0.0.1:1/"}
    assert post_plant(client, alice, body).status_code == 200
    with app.app_context():
        assert Subscription.select().count() == 0 and Delivery.select().count() == 0
    # The portal's pages register through the same operations, behind their
    # session and CSRF checks (tests/portal/test_security.py).
    rules = {rule.rule for rule in app.url_map.iter_rules()
             if not rule.rule.startswith("/portal/")}
    assert not any("subscription" in rule for rule in rules), rules
    assert {rule for rule in rules if "webhook" in rule} <= {
        "/webhooks", "/webhooks/<row_id:id>", "/webhooks/<row_id:id>/enable",
        "/webhooks/<row_id:id>/disable",
        "/webhooks/<row_id:id>/rotate-secret", "/webhooks/<row_id:id>/deliveries",
        "/webhooks/<row_id:id>/deliveries/<delivery_id:delivery_id>",
        "/webhooks/<row_id:id>/deliveries/<delivery_id:delivery_id>/resend",
        "/webhooks/<row_id:id>/test", "/webhooks/<row_id:id>/recover",
        "/webhooks/portal-links"}


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_api7_a_receiver_redirect_is_followed_neither_by_the_create_nor_by_the_worker(
        app, client, runner, alice, make_receiver, status):
    """A receiver that points elsewhere (say, at an internal address) never
    gets the service to send anything there."""
    target = make_receiver()
    redirecting = make_receiver(Answer(status=status, headers={"Location": target.url}))
    subscribe(runner, redirecting.url)

    assert post_plant(client, alice, NEW_PLANT).status_code == 200
    redirecting.wait_for(1)
    retry_now(runner)

    redirecting.wait_for(2)
    assert target.requests == []
    with app.app_context():
        delivery = Delivery.get()
        assert delivery.status != Delivery.DELIVERED
        assert delivery.last_error.startswith(f"HTTP {status}")


def test_api7_the_worker_reads_an_endless_receiver_answer_only_up_to_the_cap(
        app, client, runner, alice, make_receiver):
    receiver = make_receiver(Answer(status=500, endless=True))
    subscribe(runner, receiver.url)
    assert post_plant(client, alice, NEW_PLANT).status_code == 200
    receiver.wait_for(1)

    retry_now(runner)

    receiver.wait_for(2)
    with app.app_context():
        delivery = Delivery.get()
        assert delivery.attempts == 2 and delivery.last_error.startswith("HTTP 500")
        # Reading the 1 GiB announced would have run into the read timeout.
        for attempt in Attempt.select():
            assert attempt.status_code == 500
            assert attempt.duration_ms < app.config["WEBHOOK_READ_TIMEOUT"] * 1000
