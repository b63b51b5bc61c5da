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
