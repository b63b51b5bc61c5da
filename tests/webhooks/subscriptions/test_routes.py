"""Self-service webhooks over the API: every route and answer, per-user
scoping, scopes, the per-user cap and the served document, against real
receivers on loopback (allowed by PLANTSTORE_WEBHOOK_ALLOWED_NETWORKS)."""
import datetime

import pytest

from helpers import assert_error, bearer, create_plant, free_port
from plantstore.db.models import Delivery, Subscription
from plantstore.web.auth import READ, WEBHOOKS_READ, WEBHOOKS_WRITE, WRITE
from plantstore.webhooks.receivers.registration import BEARER_MAX_LENGTH, URL_MAX_LENGTH
from plugins.webhooks import (
    Answer,
    run_worker,
    subscribe,
    verify,
    wait_for_attempts,
    wait_for_leases_to_run_out,
)

LOOPBACK = {"WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8"}


@pytest.fixture
def app_config():
    return {**LOOPBACK, "WEBHOOK_RETRY_SCHEDULE": ""}


def register(client, token, url, **extra):
    """POST /webhooks; the response."""
    return client.post("/webhooks", json={"url": url, **extra}, headers=bearer(token))


def created(client, token, url, **extra):
    """Register ``url`` for the token's user; the 201 body."""
    response = register(client, token, url, **extra)
    assert response.status_code == 201, response.data
    return response.get_json()


def test_post_webhooks_answers_201_with_id_url_active_and_a_secret(client, alice):
    response = register(client, alice, "http://127.0.0.1:9/hook", bearer="tok-en_1")

    assert response.status_code == 201
    body = response.get_json()
    assert list(body) == ["id", "url", "active", "secret"]
    assert body["url"] == "http://127.0.0.1:9/hook" and body["active"] is True
    assert body["secret"].startswith("whsec_")
    assert response.headers["Location"].endswith(f"/webhooks/{body['id']}")


def test_secret_and_bearer_never_appear_after_creation(client, alice):
    body = created(client, alice, "http://127.0.0.1:9/hook", bearer="very-private")

    for path in ("/webhooks", f"/webhooks/{body['id']}"):
        response = client.get(path, headers=bearer(alice))
        assert response.status_code == 200
        assert body["secret"] not in response.text and "very-private" not in response.text
    shown = client.get(f"/webhooks/{body['id']}", headers=bearer(alice)).get_json()
    assert set(shown) == {"id", "url", "active", "owner", "rate_limit", "disabled_at",
                          "disabled_reason", "created_at"}
    assert shown["owner"] == "alice" and shown["created_at"].endswith("Z")


def test_list_shows_the_callers_own_and_an_admin_sees_every_one(client, runner, alice,
                                                                 bob, admin):
    mine = created(client, alice, "http://127.0.0.1:9/alice")["id"]
    theirs = created(client, bob, "http://127.0.0.1:9/bob")["id"]
    operators, _ = subscribe(runner, "http://127.0.0.1:9/operator")

    def ids(token):
        response = client.get("/webhooks", headers=bearer(token))
        assert response.status_code == 200
        return [item["id"] for item in response.get_json()]

    assert ids(alice) == [mine]
    assert ids(bob) == [theirs]
    assert ids(admin) == [mine, theirs, operators]
    owners = [item["owner"] for item in client.get("/webhooks", headers=bearer(admin)).json]
    assert owners == ["alice", "bob", None]


OBJECT_ROUTES = [
    ("get", "/webhooks/{id}", None),
    ("patch", "/webhooks/{id}", {"rate_limit": 5}),
    ("delete", "/webhooks/{id}", None),
    ("post", "/webhooks/{id}/enable", None),
    ("post", "/webhooks/{id}/rotate-secret", None),
    ("get", "/webhooks/{id}/deliveries", None),
    ("post", "/webhooks/{id}/test", None),
    ("post", "/webhooks/{id}/recover", {"since": "2000-01-01T00:00:00Z"}),
]


@pytest.mark.parametrize("method, path, body", OBJECT_ROUTES)
def test_another_users_subscription_is_404_like_an_unknown_one(client, alice, bob,
                                                               method, path, body):
    alices = created(client, alice, "http://127.0.0.1:9/hook")["id"]

    other = getattr(client, method)(path.format(id=alices), json=body, headers=bearer(bob))
    unknown = getattr(client, method)(path.format(id=alices + 1000), json=body,
                                      headers=bearer(bob))

    assert_error(other, 404)
    assert_error(unknown, 404)
    assert other.get_json()["message"].replace(str(alices), "N") == (
        unknown.get_json()["message"].replace(str(alices + 1000), "N"))
    assert Subscription.get_by_id(alices).secret  # untouched


@pytest.mark.parametrize("method, path, body", OBJECT_ROUTES)
def test_an_admin_manages_every_users_subscription(client, alice, admin, method, path,
                                                   body):
    alices = created(client, alice, "http://127.0.0.1:9/hook")["id"]
    response = getattr(client, method)(path.format(id=alices), json=body,
                                       headers=bearer(admin))
    assert response.status_code in (200, 202, 204), response.data


@pytest.mark.parametrize("raw", ["abc", "0", "-1", "2147483648", "1_0", "1.0"])
def test_a_malformed_subscription_id_is_400_naming_id(client, alice, raw):
    body = assert_error(client.get(f"/webhooks/{raw}", headers=bearer(alice)), 400)
    assert "id" in body["details"]


def test_delete_answers_204_then_the_subscription_is_gone(client, alice):
    body = created(client, alice, "http://127.0.0.1:9/hook")

    response = client.delete(f"/webhooks/{body['id']}", headers=bearer(alice))

    assert response.status_code == 204 and response.data == b""
    assert_error(client.get(f"/webhooks/{body['id']}", headers=bearer(alice)), 404)


@pytest.mark.parametrize("scopes, method, path, status", [
    ((READ, WRITE), "get", "/webhooks", 403),
    ((READ, WRITE), "post", "/webhooks", 403),
    ((WEBHOOKS_READ,), "post", "/webhooks", 403),
    ((WEBHOOKS_READ,), "get", "/webhooks", 200),
    ((WEBHOOKS_WRITE,), "get", "/webhooks", 403),
])
def test_webhook_routes_need_the_webhook_scopes(client, make_token, scopes, method, path,
                                                status):
    token = make_token("carol", scopes=scopes)
    response = getattr(client, method)(path, json={"url": "http://127.0.0.1:9/"},
                                       headers=bearer(token))
    assert response.status_code == status, response.data
    if status == 403:
        assert "webhooks:" in assert_error(response, 403)["message"]


def test_webhook_routes_need_a_token(client):
    response = client.get("/webhooks")
    assert_error(response, 401)
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("body, field", [
    ({}, "url"),
    ({"url": 5}, "url"),
    ({"url": "ftp://127.0.0.1/hook"}, "url"),
    ({"url": "http://user:pw@127.0.0.1/hook"}, "url"),
    ({"url": "http://127.0.0.1/ hook"}, "url"),
    ({"url": "http://127.0.0.1/hook", "bearer": "two\r\nlines"}, "bearer"),
    ({"url": "http://127.0.0.1/hook", "bearer": ""}, "bearer"),
])
def test_a_bad_registration_is_400_naming_the_field(client, alice, body, field):
    response = client.post("/webhooks", json=body, headers=bearer(alice))
    assert field in assert_error(response, 400)["details"]
    assert Subscription.select().count() == 0


def longest_url(extra=0):
    """A loopback receiver URL of ``URL_MAX_LENGTH`` characters, plus ``extra``."""
    start = "http://127.0.0.1:9/"
    return start + "a" * (URL_MAX_LENGTH - len(start) + extra)


def test_a_url_of_the_longest_length_is_taken_and_one_character_more_is_400(client, alice):
    assert register(client, alice, longest_url()).status_code == 201

    refused = register(client, alice, longest_url(extra=1))

    assert assert_error(refused, 400)["details"] == {
        "url": [f'Must be 1 to {URL_MAX_LENGTH} characters, '
                'e.g. "https://hooks.example.com/plantstore".']}
    assert Subscription.select().count() == 1


def test_a_bearer_of_the_longest_length_is_taken_and_one_character_more_is_400(client,
                                                                              alice):
    url = "http://127.0.0.1:9/hook"
    taken = register(client, alice, url, bearer="b" * BEARER_MAX_LENGTH)
    assert taken.status_code == 201
    assert Subscription.get_by_id(taken.get_json()["id"]).bearer_token == \
        "b" * BEARER_MAX_LENGTH

    refused = register(client, alice, url, bearer="b" * (BEARER_MAX_LENGTH + 1))

    assert assert_error(refused, 400)["details"] == {
        "bearer": [f'Must be 1 to {BEARER_MAX_LENGTH} characters, e.g. "rcv-token-1".']}
    assert Subscription.select().count() == 1


def test_the_document_states_the_limits_of_url_and_bearer(client):
    schema = client.get("/openapi.json").get_json()["components"]["schemas"]
    properties = schema["NewSubscription"]["properties"]
    assert (properties["url"]["minLength"], properties["url"]["maxLength"]) == (
        1, URL_MAX_LENGTH)
    assert (properties["bearer"]["minLength"], properties["bearer"]["maxLength"]) == (
        1, BEARER_MAX_LENGTH)


class TestPerUserCap:
    @pytest.fixture
    def app_config(self):
        return {**LOOPBACK, "WEBHOOK_MAX_PER_USER": 2}

    def test_a_user_holds_at_most_the_configured_number(self, client, alice, bob):
        created(client, alice, "http://127.0.0.1:9/1")
        second = created(client, alice, "http://127.0.0.1:9/2")

        refused = register(client, alice, "http://127.0.0.1:9/3")

        assert "(2)" in assert_error(refused, 409)["message"]
        created(client, bob, "http://127.0.0.1:9/bob")  # everyone has their own cap
        client.delete(f"/webhooks/{second['id']}", headers=bearer(alice))
        created(client, alice, "http://127.0.0.1:9/3")


@pytest.mark.slow
def test_a_users_subscription_hears_only_about_its_owners_plants(
        app, client, runner, alice, bob, admin, make_receiver):
    receivers = {name: make_receiver() for name in ("alice", "bob", "admin", "operator")}
    secrets = {name: created(client, token, receivers[name].url)["secret"]
               for name, token in (("alice", alice), ("bob", bob), ("admin", admin))}
    _, secrets["operator"] = subscribe(runner, receivers["operator"].url)

    create_plant(client, alice, 1)
    create_plant(client, bob, 2)
    # Four owners share the web process's sending slots, so the second
    # create may find an owner's share still taken by the first's attempt
    # (on a slow machine) and leave that event to the workers, as in a
    # deployment: once the web process's attempts are over, a worker runs.
    with app.app_context():
        wait_for_leases_to_run_out()
    run_worker(runner)

    def heard(name, count):
        got = receivers[name].wait_for(count)
        return sorted(verify(secrets[name], request)["id"] for request in got)

    assert heard("alice", 1) == [1]
    assert heard("bob", 1) == [2]
    assert heard("admin", 2) == [1, 2]
    assert heard("operator", 2) == [1, 2]
    assert len(receivers["alice"].requests) == len(receivers["bob"].requests) == 1


@pytest.mark.slow
def test_the_receiver_gets_the_bearer_token_and_a_new_plant_body(client, alice,
                                                                 make_receiver):
    receiver = make_receiver()
    secret = created(client, alice, receiver.url, bearer="receiver-token")["secret"]

    create_plant(client, alice, 7, name="ivy")

    [got] = receiver.wait_for(1)
    assert got.headers["authorization"] == "Bearer receiver-token"
    assert verify(secret, got) == {"id": 7, "name": "ivy"}


@pytest.mark.slow
def test_rotate_secret_answers_a_new_secret_and_the_old_one_keeps_signing(
        client, alice, make_receiver):
    receiver = make_receiver()
    body = created(client, alice, receiver.url)

    response = client.post(f"/webhooks/{body['id']}/rotate-secret", headers=bearer(alice))

    assert response.status_code == 200
    rotated = response.get_json()
    assert rotated["secret"].startswith("whsec_") and rotated["secret"] != body["secret"]
    create_plant(client, alice, 1)
    [got] = receiver.wait_for(1)
    assert verify(body["secret"], got) == verify(rotated["secret"], got)


@pytest.mark.slow
def test_deliveries_are_listed_newest_first_with_every_attempt_and_paged(
        app, client, alice, make_receiver):
    receiver = make_receiver(answer=Answer(500, body=b"down"))
    body = created(client, alice, receiver.url)
    create_plant(client, alice, 1)
    wait_for_attempts(1)
    receiver.answer = Answer(200)
    create_plant(client, alice, 2)
    wait_for_attempts(2)
    path = f"/webhooks/{body['id']}/deliveries"

    response = client.get(path, headers=bearer(alice))

    assert response.status_code == 200
    newest, oldest = response.get_json()
    assert (newest["status"], oldest["status"]) == ("delivered", "failed")
    assert newest["webhook_id"] == receiver.requests[1].headers["webhook-id"]
    assert oldest["webhook_id"] == receiver.requests[0].headers["webhook-id"]
    [attempt] = oldest["attempts"]
    assert (attempt["status_code"], attempt["error"]) == (500, "down")
    assert attempt["duration_ms"] >= 0 and attempt["at"].endswith("Z")
    assert attempt["response"] == {"status": 500, "duration_ms": attempt["duration_ms"],
                                   "body": "down"}
    assert newest["attempts"][0]["response"]["body"] == "ok"
    assert newest["attempts"][0]["error"] is None and newest["next_attempt_at"] is None

    failed = client.get(path + "?status=failed", headers=bearer(alice)).get_json()
    assert [d["id"] for d in failed] == [oldest["id"]]

    first = client.get(path + "?limit=1", headers=bearer(alice))
    assert [d["id"] for d in first.get_json()] == [newest["id"]]
    next_page = first.headers["Link"].split(";")[0].strip("<>")
    second = client.get(next_page, headers=bearer(alice))
    assert [d["id"] for d in second.get_json()] == [oldest["id"]]
    assert "Link" not in second.headers


@pytest.mark.slow
def test_each_attempt_keeps_the_receivers_answer_bounded_and_storable(
        client, alice, make_receiver):
    body = (b'{"error": "name \x00 is not accepted", "detail": "\xff\xfe' + b"x" * 4000
            + b'"}')
    receiver = make_receiver(answer=Answer(400, body=body))
    hook = created(client, alice, receiver.url)
    create_plant(client, alice, 1)
    wait_for_attempts(1)

    [delivery] = client.get(f"/webhooks/{hook['id']}/deliveries",
                            headers=bearer(alice)).get_json()

    response = delivery["attempts"][0]["response"]
    assert response["status"] == 400 and response["duration_ms"] >= 0
    assert len(response["body"]) == 1024
    assert response["body"].startswith('{"error": "name \ufffd is not accepted", '
                                       '"detail": "\ufffd\ufffdxxx')


def test_an_attempt_without_an_answer_has_no_response(client, alice):
    hook = created(client, alice, f"http://127.0.0.1:{free_port()}/closed")
    create_plant(client, alice, 1)
    wait_for_attempts(1)

    [delivery] = client.get(f"/webhooks/{hook['id']}/deliveries",
                            headers=bearer(alice)).get_json()

    [attempt] = delivery["attempts"]
    assert attempt["response"] is None and attempt["status_code"] is None
    assert attempt["error"]


@pytest.mark.parametrize("query", ["limit=0", "limit=101", "status=lost", "after=x",
                                   "limit=1&limit=2", "limit=+5", "limit=1_0", "after=0",
                                   "after=9223372036854775808"])
def test_a_bad_deliveries_query_is_400(client, alice, query):
    body = created(client, alice, "http://127.0.0.1:9/hook")
    response = client.get(f"/webhooks/{body['id']}/deliveries?{query}", headers=bearer(alice))
    assert_error(response, 400)


@pytest.mark.slow
def test_test_answers_202_and_the_receiver_gets_a_signed_example_event(
        client, runner, alice, make_receiver):
    receiver = make_receiver()
    body = created(client, alice, receiver.url)

    response = client.post(f"/webhooks/{body['id']}/test", headers=bearer(alice))

    assert response.status_code == 202
    queued = response.get_json()
    assert (queued["status"], queued["event"]) == ("pending", "plant.test")
    run_worker(runner)
    [got] = receiver.wait_for(1)
    assert got.headers["webhook-id"] == queued["webhook_id"]
    assert set(verify(body["secret"], got)) == {"id", "name", "tag"}
    listed = client.get(f"/webhooks/{body['id']}/deliveries", headers=bearer(alice)).json
    assert [(d["event"], d["status"]) for d in listed] == [("plant.test", "delivered")]


@pytest.mark.slow
def test_recover_sends_every_failed_delivery_since_the_time_again_with_its_id(
        client, runner, alice, make_receiver):
    receiver = make_receiver(answer=Answer(500))
    body = created(client, alice, receiver.url)
    create_plant(client, alice, 1)
    create_plant(client, alice, 2)
    first_ids = [r.headers["webhook-id"] for r in receiver.wait_for(2)]
    wait_for_attempts(2)
    assert Delivery.select().where(Delivery.status == "failed").count() == 2
    receiver.answer = Answer(200)
    path = f"/webhooks/{body['id']}/recover"

    later = (datetime.datetime.now(datetime.timezone.utc)
             + datetime.timedelta(hours=1)).isoformat()
    none = client.post(path, json={"since": later}, headers=bearer(alice))
    response = client.post(path, json={"since": "2000-01-01T00:00:00+02:00"},
                           headers=bearer(alice))

    assert (none.status_code, none.get_json()) == (202, {"queued": 0})
    assert (response.status_code, response.get_json()) == (202, {"queued": 2})
    run_worker(runner)
    again = [r.headers["webhook-id"] for r in receiver.wait_for(4)[2:]]
    assert sorted(again) == sorted(first_ids)
    assert Delivery.select().where(Delivery.status == "delivered").count() == 2


@pytest.mark.parametrize("since", [None, "yesterday", "2026-01-01T00:00:00", 5])
def test_recover_needs_an_rfc_3339_time_with_an_offset(client, alice, since):
    body = created(client, alice, "http://127.0.0.1:9/hook")
    response = client.post(f"/webhooks/{body['id']}/recover",
                           json={} if since is None else {"since": since},
                           headers=bearer(alice))
    assert "since" in assert_error(response, 400)["details"]


@pytest.mark.slow
def test_enable_reactivates_a_subscription_a_410_disabled(client, alice, make_receiver):
    receiver = make_receiver(answer=Answer(410))
    body = created(client, alice, receiver.url)
    create_plant(client, alice, 1)
    wait_for_attempts(1)
    path = f"/webhooks/{body['id']}"
    disabled = client.get(path, headers=bearer(alice)).get_json()
    assert disabled["active"] is False and "410" in disabled["disabled_reason"]
    assert disabled["disabled_at"].endswith("Z")
    refusals = [assert_error(client.post(path + "/test", headers=bearer(alice)), 409),
                assert_error(client.post(path + "/recover", json={"since": "2000-01-01T00:00:00Z"},
                                         headers=bearer(alice)), 409)]
    for refusal in refusals:
        assert refusal["message"].startswith(f"Webhook subscription {body['id']} is disabled (")
        assert refusal["message"].endswith(f"enable it first with POST {path}/enable.")

    response = client.post(path + "/enable", headers=bearer(alice))

    assert response.status_code == 200
    enabled = response.get_json()
    assert (enabled["active"], enabled["disabled_reason"], enabled["disabled_at"]) == (
        True, None, None)
    receiver.answer = Answer(200)
    create_plant(client, alice, 2)
    assert len(receiver.wait_for(2)) == 2


WEBHOOK_OPERATIONS = {
    ("/webhooks", "post"): ("webhooks:write", {"201", "400", "401", "403", "409", "413",
                                                "415"}),
    ("/webhooks", "get"): ("webhooks:read", {"200", "401", "403"}),
    ("/webhooks/{id}", "get"): ("webhooks:read", {"200", "400", "401", "403", "404"}),
    ("/webhooks/{id}", "patch"): ("webhooks:write", {"200", "400", "401", "403", "404", "413",
                                                      "415"}),
    ("/webhooks/{id}", "delete"): ("webhooks:write", {"204", "400", "401", "403", "404"}),
    ("/webhooks/{id}/enable", "post"): ("webhooks:write",
                                        {"200", "400", "401", "403", "404"}),
    ("/webhooks/{id}/rotate-secret", "post"): ("webhooks:write",
                                               {"200", "400", "401", "403", "404"}),
    ("/webhooks/{id}/deliveries", "get"): ("webhooks:read",
                                           {"200", "400", "401", "403", "404"}),
    ("/webhooks/{id}/test", "post"): ("webhooks:write",
                                      {"202", "400", "401", "403", "404", "409"}),
    ("/webhooks/{id}/recover", "post"): ("webhooks:write", {"202", "400", "401", "403",
                                                            "404", "409", "413", "415"}),
    ("/webhooks/{id}/disable", "post"): ("webhooks:write",
                                         {"200", "400", "401", "403", "404"}),
    ("/webhooks/{id}/deliveries/{delivery_id}", "get"): (
        "webhooks:read", {"200", "400", "401", "403", "404"}),
    ("/webhooks/{id}/deliveries/{delivery_id}/resend", "post"): (
        "webhooks:write", {"202", "400", "401", "403", "404", "409"}),
    ("/webhooks/portal-links", "post"): ("webhooks:write", {"201", "400", "401", "403",
                                                             "404", "413", "415"}),
}


def test_the_document_describes_every_webhook_route_its_scope_and_statuses(client):
    document = client.get("/openapi.json").get_json()
    served = {(path, method) for path, item in document["paths"].items()
              if path.startswith("/webhooks") for method in item if method != "parameters"}
    assert served == set(WEBHOOK_OPERATIONS)
    for (path, method), (scope, statuses) in WEBHOOK_OPERATIONS.items():
        operation = document["paths"][path][method]
        assert operation["security"] == [{"bearerAuth": [scope]}], (path, method)
        assert statuses <= set(operation["responses"]), (path, method)


def test_deleting_a_user_deletes_their_subscriptions_rather_than_orphaning_them(
        client, runner, alice):
    created(client, alice, "http://127.0.0.1:9/hook")
    operators, _ = subscribe(runner, "http://127.0.0.1:9/operator")

    assert runner.invoke(args=["users", "delete", "alice"]).exit_code == 0

    # An orphan (no owner) would be an operator's, told about every plant.
    assert [s.id for s in Subscription.select()] == [operators]
