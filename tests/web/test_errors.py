"""SPEC §2: every error of every route is ``application/json``
``{"error": <status>, "message": "..."}`` — routing (404, 405), body limits
(413, 415), bugs (500) — and HEAD/OPTIONS answer sensibly."""
import pytest
import requests
from peewee import DatabaseError

from helpers import assert_error, bearer
from plantstore import create_app, db

MIB = 1024 * 1024
GENERIC_500 = {"error": 500, "message": "The server could not complete the request."}


def padded_plant(size):
    """A valid create body of exactly ``size`` bytes (JSON whitespace padding)."""
    body = b'{"id": 7, "name": "fern"}'
    return body[:-1] + b" " * (size - len(body)) + b"}"


@pytest.mark.parametrize("method, path", [
    ("GET", "/nope"), ("POST", "/nope"), ("GET", "/plants/7/leaves"),
    ("GET", "/docs/no-such-asset.js"), ("DELETE", "/"),
])
def test_unknown_route_is_404_json(client, method, path):
    error = assert_error(client.open(path, method=method), 404)
    assert path in error["message"]


@pytest.mark.parametrize("method, path, allowed", [
    ("DELETE", "/plants", {"GET", "POST"}),
    ("PUT", "/plants", {"GET", "POST"}),
    ("GET", "/plants/7", {"DELETE"}),
    ("PATCH", "/plants/7", {"DELETE"}),
    ("POST", "/healthz", {"GET"}),
])
def test_wrong_method_is_405_with_allow_header(client, alice, method, path, allowed):
    response = client.open(path, method=method, headers=bearer(alice))
    assert_error(response, 405)
    assert allowed <= {m.strip() for m in response.headers["Allow"].split(",")}
    assert method not in response.headers["Allow"]


def test_body_over_the_default_1_mib_cap_is_413(client, alice):
    response = client.post("/plants", data=padded_plant(MIB + 1),
                           content_type="application/json", headers=bearer(alice))
    error = assert_error(response, 413)
    assert str(MIB) in error["message"]


def test_body_of_exactly_1_mib_is_accepted(client, alice):
    response = client.post("/plants", data=padded_plant(MIB),
                           content_type="application/json", headers=bearer(alice))
    assert response.status_code == 200, response.data


class TestConfiguredBodyCap:
    """MAX_CONTENT_LENGTH sets the body cap."""

    @pytest.fixture
    def app_config(self):
        """A 64-byte cap instead of the default 1 MiB."""
        return {"MAX_CONTENT_LENGTH": 64}

    def test_body_over_max_content_length_is_413_naming_it(self, client, alice):
        response = client.post("/plants", data=padded_plant(65),
                               content_type="application/json", headers=bearer(alice))
        assert "64" in assert_error(response, 413)["message"]

    def test_content_type_is_checked_before_the_size(self, client, alice):
        response = client.post("/plants", data=b"x" * 65, content_type="text/plain",
                               headers=bearer(alice))
        assert_error(response, 415)

    def test_size_is_checked_before_the_json(self, client, alice):
        response = client.post("/plants", data=b"{" * 65, content_type="application/json",
                               headers=bearer(alice))
        assert_error(response, 413)

    def test_body_at_max_content_length_is_accepted(self, client, alice):
        response = client.post("/plants", data=padded_plant(64),
                               content_type="application/json", headers=bearer(alice))
        assert response.status_code == 200, response.data


@pytest.mark.slow
def test_chunked_body_over_the_cap_is_413_through_gunicorn(gunicorn_server, alice):
    server = gunicorn_server(workers=1, env={"PLANTSTORE_MAX_CONTENT_LENGTH": "1000"})

    def chunks(total):
        body = padded_plant(total)
        for start in range(0, len(body), 100):
            yield body[start:start + 100]

    url = server.url + "/plants"
    headers = {**bearer(alice), "Content-Type": "application/json"}
    fitting = requests.post(url, data=chunks(1000), headers=headers, timeout=10)
    assert fitting.status_code == 200, fitting.text
    too_large = requests.post(url, data=chunks(1001), headers=headers, timeout=10)
    assert too_large.status_code == 413, too_large.text
    assert too_large.headers["Content-Type"] == "application/json"
    assert too_large.json()["error"] == 413


@pytest.mark.parametrize("content_type", [
    None, "text/plain", "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x", "application/xml",
])
def test_post_that_is_not_json_is_415(client, alice, content_type):
    headers = bearer(alice)
    if content_type:
        headers["Content-Type"] = content_type
    response = client.post("/plants", data=b'{"id": 7, "name": "fern"}', headers=headers)
    assert_error(response, 415)


def test_a_bug_is_a_500_that_shows_no_internals(app, client):
    def explode():
        raise RuntimeError("secret detail at /srv/plantstore/app.py line 12")
    app.add_url_rule("/explode", view_func=explode)
    response = client.get("/explode")
    assert_error(response, 500)
    assert response.get_json() == GENERIC_500
    assert b"secret" not in response.data and b"Traceback" not in response.data


def test_a_database_failure_is_a_500_without_sql(app, client):
    def broken_query():
        db.database.execute_sql("SELECT hidden_column FROM no_such_table")
    app.add_url_rule("/broken-query", view_func=broken_query)
    with pytest.raises(DatabaseError):  # the failure is real...
        with db.database.connection_context():
            broken_query()
    response = client.get("/broken-query")  # ...and the client sees none of it
    assert response.get_json() == GENERIC_500
    for leak in (b"SELECT", b"no_such_table", b"hidden_column", b"Traceback"):
        assert leak not in response.data


@pytest.mark.parametrize("url", [
    "sqlite:////nonexistent-directory/plantstore.db",
    "postgresql://nobody@127.0.0.1:1/plantstore",
])
def test_readyz_is_503_json_when_the_database_is_unreachable(url):
    app = create_app({"TESTING": True, "DATABASE_URL": url})
    try:
        assert_error(app.test_client().get("/readyz"), 503)
    finally:
        db.database.close_all()


def test_head_answers_like_get_without_a_body(client, alice):
    client.post("/plants", json={"id": 7, "name": "fern"}, headers=bearer(alice))
    get = client.get("/plants", headers=bearer(alice))
    head = client.head("/plants", headers=bearer(alice))
    assert (head.status_code, head.data) == (200, b"")
    assert head.headers["Content-Length"] == get.headers["Content-Length"]
    assert head.mimetype == "application/json"


def test_head_of_errors_keeps_status_and_json_type_without_a_body(client):
    unknown = client.head("/nope")
    assert (unknown.status_code, unknown.data, unknown.mimetype) == (
        404, b"", "application/json")
    anonymous = client.head("/plants")
    assert (anonymous.status_code, anonymous.data) == (401, b"")
    assert anonymous.headers["WWW-Authenticate"] == 'Bearer realm="plantstore"'


@pytest.mark.parametrize("path, allowed", [
    ("/plants", {"GET", "HEAD", "OPTIONS", "POST"}),
    ("/plants/7", {"DELETE", "OPTIONS"}),
])
def test_options_lists_the_allowed_methods_without_a_token(client, path, allowed):
    response = client.options(path)
    assert response.status_code == 200
    assert {m.strip() for m in response.headers["Allow"].split(",")} == allowed
    assert response.data == b""


@pytest.mark.parametrize("path", ["/plants", "/plants/1", "/healthz", "/openapi.json"])
def test_options_answers_are_empty_without_a_content_type(client, path):
    response = client.options(path)
    assert response.status_code == 200
    assert response.data == b""
    assert "Content-Type" not in response.headers
    assert "OPTIONS" in response.headers["Allow"]
