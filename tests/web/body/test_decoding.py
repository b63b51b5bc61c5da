"""Numbers no one should send: exponents past what can be read, NaN and
Infinity (not JSON), tens of thousands of digits, -0. Each is a clean answer
naming the field (a 401 first when the token is bad), on every route that
reads a body or an id from its path, never a 500."""
import pytest
import requests

from helpers import assert_error, bearer
from plantstore.db.models import Plant, Subscription

HUGE = "1e99999999999999999999"
TINY = "1e-99999999999999999999"

UNREADABLE_BODIES = [
    pytest.param('{"id": @, "name": "fern"}'.replace("@", HUGE), "id", id="huge exponent in id"),
    pytest.param('{"id": @, "name": "fern"}'.replace("@", TINY), "id", id="tiny exponent in id"),
    pytest.param('{"id": -@, "name": "fern"}'.replace("@", HUGE), "id", id="-huge exponent"),
    pytest.param('{"id": 1, "name": "fern", "note": @}'.replace("@", HUGE), "note",
                 id="huge exponent in an ignored field"),
    pytest.param('{"id": 1, "name": "fern", "x": {"y": [0, @]}}'.replace("@", TINY), "x.y.1",
                 id="tiny exponent nested in an ignored field"),
    pytest.param('{"id": 12345e999999999999999999, "name": "fern"}', "id",
                 id="18-digit exponent past the range"),
    pytest.param('{"id": 0e99999999999999999999, "name": "fern"}', "id", id="zero, huge exponent"),
    pytest.param('{"id": NaN, "name": "fern"}', "id", id="NaN id"),
    pytest.param('{"id": 1, "name": "fern", "x": Infinity}', "x", id="Infinity ignored"),
    pytest.param('{"id": 1, "name": "fern", "x": -Infinity}', "x", id="-Infinity ignored"),
    pytest.param(HUGE, "body", id="a bare huge number"),
]


@pytest.mark.parametrize("body, field", UNREADABLE_BODIES)
def test_a_create_with_an_unreadable_number_is_a_400_naming_its_field(
        app, client, alice, body, field):
    response = client.post("/plants", data=body, content_type="application/json",
                           headers=bearer(alice))
    error = assert_error(response, 400)
    assert list(error["details"]) == [field], error
    [message] = error["details"][field]
    assert "e.g." in message or "such as" in message, message
    with app.app_context():
        assert Plant.select().count() == 0


@pytest.mark.parametrize("body, field", [
    pytest.param('{"url": "https://hooks.example.com/x", "x": @}'.replace("@", HUGE), "x",
                 id="ignored field"),
    pytest.param('{"url": @}'.replace("@", TINY), "url", id="url"),
    pytest.param('{"url": NaN}', "url", id="NaN url"),
])
def test_a_webhook_registration_with_an_unreadable_number_is_a_400_naming_its_field(
        app, client, alice, body, field):
    response = client.post("/webhooks", data=body, content_type="application/json",
                           headers=bearer(alice))
    assert list(assert_error(response, 400)["details"]) == [field]
    with app.app_context():
        assert Subscription.select().count() == 0


def test_a_recovery_with_an_unreadable_since_is_a_400_naming_it(client, alice, runner):
    created = client.post("/webhooks", json={"url": "https://93.184.215.14/hook"},
                          headers=bearer(alice))
    assert created.status_code == 201, created.data
    response = client.post(f"/webhooks/{created.get_json()['id']}/recover",
                           data='{"since": @}'.replace("@", HUGE), content_type="application/json",
                           headers=bearer(alice))
    assert list(assert_error(response, 400)["details"]) == ["since"]


@pytest.mark.parametrize("path", ["/plants", "/webhooks"])
@pytest.mark.parametrize("body", [
    '{"id": @}'.replace("@", HUGE), '{"x": NaN}', '{"url": @}'.replace("@", TINY)])
def test_a_bad_token_is_a_401_before_any_number_is_read(client, path, body):
    response = client.post(path, data=body, content_type="application/json",
                           headers=bearer("pst_not-a-token"))
    assert_error(response, 401)


@pytest.mark.parametrize("segment, field_message", [
    (HUGE, "exponent"), (TINY, "exponent"), ("-" + HUGE, "exponent"),
    ("12345e999999999999999999", "exponent"),
    ("1E+999999", "less than or equal to"), ("-1E+999999", "greater than or equal to"),
    ("9" * 5000, "less than or equal to"), ("NaN", "e.g."), ("Infinity", "e.g."),
    ("1.5", "e.g."),
])
def test_deleting_an_unreadable_plant_id_is_a_400_naming_id(client, alice, segment,
                                                            field_message):
    error = assert_error(client.delete(f"/plants/{segment}", headers=bearer(alice)), 400)
    assert list(error["details"]) == ["id"]
    assert field_message in error["details"]["id"][0], error


@pytest.mark.parametrize("segment", [HUGE, TINY, "9" * 5000, "-0", "NaN"])
def test_an_unreadable_subscription_id_is_a_400_naming_id(client, alice, segment):
    error = assert_error(client.get(f"/webhooks/{segment}", headers=bearer(alice)), 400)
    assert list(error["details"]) == ["id"]
    assert "e.g." in error["details"]["id"][0]


@pytest.mark.parametrize("url", [f"/plants/{HUGE}", f"/plants/{TINY}", f"/webhooks/{HUGE}"])
def test_an_unreadable_path_id_with_a_bad_token_is_a_401(client, url):
    assert_error(client.delete(url, headers=bearer("pst_not-a-token")), 401)


@pytest.mark.parametrize("query, field", [
    (f"/plants?after={HUGE}", "after"), (f"/plants?limit={TINY}", "limit"),
    (f"/plants?after={'9' * 5000}", "after")])
def test_an_unreadable_number_in_a_query_is_a_400_naming_it(client, alice, query, field):
    assert list(assert_error(client.get(query, headers=bearer(alice)), 400)["details"]) \
        == [field]


def test_minus_zero_and_long_ignored_numbers_are_read_as_numbers(app, client, alice):
    body = '{"id": -0, "name": "fern", "x": %s.5, "y": 1E+999999}' % ("9" * 5000)
    response = client.post("/plants", data=body, content_type="application/json",
                           headers=bearer(alice))
    assert response.status_code == 200 and response.get_json() == {"name": "fern"}
    with app.app_context():
        assert [plant.id for plant in Plant.select()] == [0]
    assert client.delete("/plants/-0", headers=bearer(alice)).status_code == 204


@pytest.mark.slow
def test_gunicorn_answers_each_unreadable_number_and_keeps_serving(gunicorn_server, alice):
    server = gunicorn_server(workers=1)
    auth = {**bearer(alice), "Content-Type": "application/json"}
    for body in ('{"id": @, "name": "a"}'.replace("@", HUGE), '{"id": 1, "name": "a", "x": NaN}'):
        response = requests.post(server.url + "/plants", data=body, headers=auth, timeout=10)
        assert response.status_code == 400, response.text
        assert response.json()["error"] == 400
    for url in (f"/plants/{HUGE}", f"/plants/{TINY}"):
        response = requests.delete(server.url + url, headers=auth, timeout=10)
        assert response.status_code == 400 and "id" in response.json()["details"]
        anonymous = requests.delete(server.url + url, timeout=10)
        assert anonymous.status_code == 401
    created = requests.post(server.url + "/plants", json={"id": 1, "name": "a"},
                            headers=auth, timeout=10)
    assert created.status_code == 200
