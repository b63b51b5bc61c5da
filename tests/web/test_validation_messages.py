"""Every 400 a client can provoke says what is expected, with an example, in
the contract's error shape: a body that is not an object or not JSON, each
field missing, null, of the wrong type or out of bounds, a time without its
offset, a malformed Idempotency-Key, a path id that is not one."""
import pytest

from helpers import assert_error, bearer

SINCE = "2026-01-31T09:00:00Z"


@pytest.fixture
def subscription_id(client, alice):
    created = client.post("/webhooks", json={"url": "https://93.184.215.14/hook"},
                          headers=bearer(alice))
    assert created.status_code == 201, created.data
    return created.get_json()["id"]


def post(client, token, path, body, **headers):
    return client.post(path, data=body, content_type="application/json",
                       headers={**bearer(token), **headers})


@pytest.mark.parametrize("body, field, example", [
    ("[1]", "body", '{"id": 1, "name": "Fern", "tag": "green"}'),
    ('"fern"', "body", '{"id": 1, "name": "Fern", "tag": "green"}'),
    ("null", "body", '{"id": 1, "name": "Fern", "tag": "green"}'),
    ("{", "body", '{"name": "Fern"}'),
    (b'{"id": 1, "name": "\xff"}', "body", "not UTF-8"),
    ('{"name": "Fern"}', "id", '"id": 1'),
    ('{"id": "1", "name": "Fern"}', "id", "e.g. 1"),
    ('{"id": 1.5, "name": "Fern"}', "id", "e.g. 1"),
    ('{"id": null, "name": "Fern"}', "id", "e.g. 1"),
    ('{"id": 1e30, "name": "Fern"}', "id", "from -9223372036854775808 to "
                                           "9223372036854775807, e.g. 1"),
    ('{"id": 1}', "name", '"name": "Fern"'),
    ('{"id": 1, "name": ""}', "name", 'e.g. "Fern"'),
    ('{"id": 1, "name": 5}', "name", 'e.g. "Fern"'),
    ('{"id": 1, "name": "Fern", "tag": null}', "tag", 'e.g. "green"'),
    ('{"id": 1, "name": "Fern", "tag": 7}', "tag", 'e.g. "green"'),
])
def test_a_bad_create_says_what_is_expected(client, alice, body, field, example):
    error = assert_error(post(client, alice, "/plants", body), 400)
    assert list(error["details"]) == [field], error
    assert example in error["details"][field][0], error
    assert example in error["message"]


def test_a_malformed_idempotency_key_shows_a_valid_one(client, alice):
    error = assert_error(post(client, alice, "/plants", '{"id": 1, "name": "Fern"}',
                              **{"Idempotency-Key": " "}), 400)
    assert "e.g. a UUID such as" in error["details"]["Idempotency-Key"][0]


@pytest.mark.parametrize("body, field, example", [
    ("[1]", "body", '{"url": "https://hooks.example.com/plantstore"}'),
    ("{}", "url", '"url": "https://hooks.example.com/plantstore"'),
    ('{"url": 5}', "url", 'e.g. "https://hooks.example.com/plantstore"'),
    ('{"url": "https://hooks.example.com/x", "bearer": 5}', "bearer", 'e.g. "rcv-token-1"'),
])
def test_a_bad_registration_says_what_is_expected(client, alice, body, field, example):
    error = assert_error(post(client, alice, "/webhooks", body), 400)
    assert list(error["details"]) == [field], error
    assert example in error["details"][field][0], error


@pytest.mark.parametrize("since", [
    "yesterday", "2026-01-31", "2026-01-31T09:00:00", "31/01/2026 09:00", 20260131, None])
def test_recover_with_a_bad_since_shows_a_valid_time(client, alice, subscription_id, since):
    response = client.post(f"/webhooks/{subscription_id}/recover", json={"since": since},
                           headers=bearer(alice))
    error = assert_error(response, 400)
    assert list(error["details"]) == ["since"]
    assert f"e.g. {SINCE}" in error["details"]["since"][0], error


@pytest.mark.parametrize("body, example", [
    ("{}", f'"since": "{SINCE}"'), ("[]", f'{{"since": "{SINCE}"}}')])
def test_recover_without_since_shows_one(client, alice, subscription_id, body, example):
    error = assert_error(post(client, alice, f"/webhooks/{subscription_id}/recover", body),
                         400)
    assert example in error["message"], error


@pytest.mark.parametrize("method, path", [
    ("DELETE", "/plants/abc"), ("GET", "/webhooks/abc"), ("GET", "/plants?limit=abc"),
    ("GET", "/plants?after=1.5")])
def test_an_id_or_number_that_is_not_one_shows_one(client, alice, method, path):
    error = assert_error(client.open(path, method=method, headers=bearer(alice)), 400)
    [messages] = error["details"].values()
    assert "e.g." in messages[0], error


@pytest.mark.parametrize("body, unknown", [
    ({"url": "https://93.184.215.14/new", "ratelimit": 5}, "ratelimit"),
    ({"urll": "https://93.184.215.14/new", "rate_limit": 3}, "urll"),
    ({"rate_limit": 3, "active": False}, "active")])
@pytest.mark.parametrize("method", ["POST", "PATCH"])
def test_an_unknown_webhook_field_is_a_400_naming_it_and_changes_nothing(
        client, alice, subscription_id, method, body, unknown):
    path = "/webhooks" if method == "POST" else f"/webhooks/{subscription_id}"
    before = client.get("/webhooks", headers=bearer(alice)).get_json()

    error = assert_error(client.open(path, method=method, json=body, headers=bearer(alice)),
                         400)

    assert error["details"][unknown] == [error["details"][unknown][0]], error
    assert error["details"][unknown][0].startswith("Unknown field: send "), error
    assert "e.g. {" in error["details"][unknown][0]
    assert client.get("/webhooks", headers=bearer(alice)).get_json() == before


def test_an_unknown_recover_field_is_a_400_naming_it(client, alice, subscription_id):
    error = assert_error(client.post(f"/webhooks/{subscription_id}/recover",
                                     json={"since": SINCE, "until": SINCE},
                                     headers=bearer(alice)), 400)
    assert list(error["details"]) == ["until"] and f'e.g. {{"since": "{SINCE}"}}' in \
        error["message"]


def test_unknown_fields_of_a_create_are_ignored_as_the_contract_says(client, alice):
    created = post(client, alice, "/plants", '{"id": 1, "name": "Fern", "colour": "green"}')
    assert created.status_code == 200 and created.get_json() == {"name": "Fern"}


@pytest.mark.parametrize("method, path, body", [
    ("PATCH", "{webhook}", '{"url": 5}'), ("PATCH", "{webhook}", '{"url": null}'),
    ("PATCH", "{webhook}", "[1]"), ("PATCH", "{webhook}", "{}"),
    ("PATCH", "{webhook}", '{"bearer": 5}'), ("PATCH", "{webhook}", '{"bearer": "a b"}'),
    ("PATCH", "{webhook}", '{"rate_limit": true}'), ("PATCH", "{webhook}", '{"url": "ftp://x"}'),
    ("PATCH", "{webhook}", '{"url": "https://u:p@93.184.215.14/"}'),
    ("POST", "/webhooks", '{"url": "https://93.184.215.14/hook", "rate_limit": 0}'),
    ("POST", "/webhooks", '{"url": "https://93.184.215.14/hook", "rate_limit": 5.5}'),
    ("POST", "/webhooks", '{"url": "https://93.184.215.14/hook", "bearer": ""}'),
    ("POST", "/webhooks", '{"url": "https://93.184.215.14/\\u0000"}'),
    ("POST", "/plants", '{"id": 1, "name": "a\\u0000"}'),
    ("POST", "/plants", '{"id": 1, "name": "\\ud800"}'),
    ("GET", "{webhook}/deliveries?status=nope", None),
    ("GET", "{webhook}/deliveries?limit=0", None),
    ("GET", "{webhook}/deliveries?limit=1000", None),
    ("GET", "{webhook}/deliveries?after=0", None),
    ("GET", "{webhook}/deliveries?limit=1&limit=2", None),
    ("GET", "/plants?limit=0", None), ("GET", "/plants?limit=1001", None),
    ("GET", "/plants?after=99999999999999999999", None),
    ("DELETE", "/plants/99999999999999999999", None),
])
def test_every_validation_message_shows_an_example(client, alice, subscription_id, method,
                                                   path, body):
    path = path.replace("{webhook}", f"/webhooks/{subscription_id}")
    response = client.open(path, method=method, data=body, content_type="application/json",
                           headers=bearer(alice))
    error = assert_error(response, 400)
    assert all("e.g." in message for messages in error["details"].values()
               for message in messages), error
    assert "e.g." in error["message"], error
