"""Editable subscriptions and the receiver's rate limit through the API and
the CLI: ``PATCH /webhooks/{id}`` (url, bearer, rate_limit), ``rate_limit``
on ``POST`` and ``GET``, ``plantstore webhooks add --rate-limit``; against a
real receiver on loopback (allowed by PLANTSTORE_WEBHOOK_ALLOWED_NETWORKS)."""
import pytest

from helpers import assert_error, bearer, create_plant, wait_until
from plantstore.db.models import Delivery, Subscription
from plantstore.web.auth import WEBHOOKS_READ
from plantstore.webhooks.receivers.registration import RATE_LIMIT_MAX
from plugins.webhooks import PATIENT_SENDS, run_worker, verify, wait_for_attempts

pytestmark = pytest.mark.app_config({**PATIENT_SENDS,
                                     "WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
                                     "WEBHOOK_RETRY_SCHEDULE": ""})


def registered(client, token, url, **extra):
    response = client.post("/webhooks", json={"url": url, **extra}, headers=bearer(token))
    assert response.status_code == 201, response.data
    return response.get_json()


def patch(client, token, subscription_id, body):
    return client.patch(f"/webhooks/{subscription_id}", json=body, headers=bearer(token))


def test_rate_limit_is_taken_at_registration_and_shown(client, alice):
    limited = registered(client, alice, "http://127.0.0.1:9/a", rate_limit=5)
    unlimited = registered(client, alice, "http://127.0.0.1:9/b")

    shown = {item["id"]: item["rate_limit"]
             for item in client.get("/webhooks", headers=bearer(alice)).get_json()}

    assert shown == {limited["id"]: 5, unlimited["id"]: None}
    assert client.get(f"/webhooks/{limited['id']}",
                      headers=bearer(alice)).get_json()["rate_limit"] == 5


@pytest.mark.parametrize("rate_limit", [0, -1, RATE_LIMIT_MAX + 1, 2.5, "5", True, [5]])
def test_a_bad_rate_limit_is_400_naming_it(client, alice, rate_limit):
    refused = client.post("/webhooks", json={"url": "http://127.0.0.1:9/a",
                                             "rate_limit": rate_limit},
                          headers=bearer(alice))
    assert "rate_limit" in assert_error(refused, 400)["details"]
    assert Subscription.select().count() == 0


def test_patch_changes_url_bearer_and_rate_limit_and_keeps_the_rest(
        client, runner, alice, make_receiver):
    old, new = make_receiver(), make_receiver()
    body = registered(client, alice, old.url, bearer="old-token")
    create_plant(client, alice, 1)
    old.wait_for(1)
    wait_for_attempts(1)

    response = patch(client, alice, body["id"], {"url": new.url, "bearer": "new-token",
                                                 "rate_limit": 50})

    assert response.status_code == 200, response.data
    changed = response.get_json()
    assert (changed["id"], changed["url"], changed["rate_limit"]) == (body["id"], new.url, 50)
    assert "new-token" not in response.text and "secret" not in changed
    assert Delivery.select().count() == 1  # the delivery log is kept
    create_plant(client, alice, 2)
    # A new limit starts with an empty bucket: a worker sends it once it refills.
    wait_until(lambda: run_worker(runner) is not None and new.requests, timeout=30,
               message="the delivery after the PATCH")
    [got] = new.wait_for(1)
    assert got.headers["authorization"] == "Bearer new-token"
    assert verify(body["secret"], got)["id"] == 2  # the same secret signs
    assert len(old.requests) == 1


def test_patch_null_removes_the_bearer_token_and_the_rate_limit(client, alice,
                                                                make_receiver):
    receiver = make_receiver()
    body = registered(client, alice, receiver.url, bearer="a-token", rate_limit=3)

    changed = patch(client, alice, body["id"], {"bearer": None, "rate_limit": None})

    assert changed.status_code == 200 and changed.get_json()["rate_limit"] is None
    stored = Subscription.get_by_id(body["id"])
    assert stored.bearer_token is None and stored.rate_limit is None
    create_plant(client, alice, 1)
    [got] = receiver.wait_for(1)
    assert "authorization" not in got.headers


def test_fields_left_out_of_a_patch_stay(client, alice):
    body = registered(client, alice, "http://127.0.0.1:9/a", bearer="tok", rate_limit=7)

    changed = patch(client, alice, body["id"], {"rate_limit": 8}).get_json()

    assert (changed["url"], changed["rate_limit"]) == ("http://127.0.0.1:9/a", 8)
    assert Subscription.get_by_id(body["id"]).bearer_token is not None


@pytest.mark.parametrize("change, field", [
    ({"url": "ftp://127.0.0.1/hook"}, "url"),
    ({"url": "http://user:pw@127.0.0.1/hook"}, "url"),
    ({"url": "http://169.254.169.254/latest"}, "url"),  # not public, not allowed
    ({"url": None}, "url"),
    ({"bearer": "two\r\nlines"}, "bearer"),
    ({"bearer": ""}, "bearer"),
    ({"rate_limit": 0}, "rate_limit"),
    ({"rate_limit": "fast"}, "rate_limit"),
])
def test_a_bad_patch_is_400_naming_the_field_and_changes_nothing(client, alice, change,
                                                                 field):
    body = registered(client, alice, "http://127.0.0.1:9/a", bearer="tok", rate_limit=2)
    before = Subscription.get_by_id(body["id"])

    refused = patch(client, alice, body["id"], {"rate_limit": 9, **change})

    assert field in assert_error(refused, 400)["details"]
    after = Subscription.get_by_id(body["id"])
    assert (after.url, after.bearer_token, after.rate_limit) == (
        before.url, before.bearer_token, before.rate_limit)


def test_a_patch_that_changes_nothing_is_400(client, alice):
    body = registered(client, alice, "http://127.0.0.1:9/a")
    refused = patch(client, alice, body["id"], {})
    assert "at least one of url, bearer and rate_limit" in str(
        assert_error(refused, 400)["details"])


def test_patch_needs_json_and_the_write_scope(client, alice, make_token):
    body = registered(client, alice, "http://127.0.0.1:9/a")
    assert_error(client.patch(f"/webhooks/{body['id']}", data="rate_limit=5",
                              headers=bearer(alice)), 415)
    reader = make_token("alice", scopes=(WEBHOOKS_READ,))
    assert "webhooks:write" in assert_error(
        patch(client, reader, body["id"], {"rate_limit": 5}), 403)["message"]
    assert_error(client.patch(f"/webhooks/{body['id']}", json={"rate_limit": 5}), 401)
    assert Subscription.get_by_id(body["id"]).rate_limit is None


def test_the_document_describes_patch_as_update_webhook(client):
    document = client.get("/openapi.json").get_json()
    operation = document["paths"]["/webhooks/{id}"]["patch"]
    assert operation["operationId"] == "updateWebhook"
    schema = operation["requestBody"]["content"]["application/json"]["schema"]
    if "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].split("/")[-1]]
    assert set(schema["properties"]) == {"url", "bearer", "rate_limit"}


def test_cli_add_takes_a_rate_limit_and_list_shows_it(runner):
    limited = runner.invoke(args=["webhooks", "add", "http://127.0.0.1:9/a",
                                  "--rate-limit", "5"])
    unlimited = runner.invoke(args=["webhooks", "add", "http://127.0.0.1:9/b"])
    assert limited.exit_code == 0 and unlimited.exit_code == 0, limited.output

    lines = runner.invoke(args=["webhooks", "list"]).stdout.splitlines()

    assert [line.split("\t")[5] for line in lines] == ["at most 5/s", "no rate limit"]
    assert [s.rate_limit for s in Subscription.select().order_by(Subscription.id)] == [5, None]


@pytest.mark.parametrize("value", ["0", "-3", "ten", str(RATE_LIMIT_MAX + 1)])
def test_cli_add_refuses_a_bad_rate_limit(runner, value):
    result = runner.invoke(args=["webhooks", "add", "http://127.0.0.1:9/a",
                                 "--rate-limit", value])
    assert result.exit_code == 2 and "--rate-limit" in result.stderr
    assert Subscription.select().count() == 0
