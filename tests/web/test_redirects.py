"""The redirects routing makes (``/docs`` → ``/docs/``, a doubled slash):
a path on the host the client asked, whatever its ``Host`` header says, in
the contract's error shape; ``OPTIONS`` answered as the target would."""
import pytest
import requests

from helpers import bearer

HOSTILE_HOST = {"Host": "evil.example"}


@pytest.mark.parametrize("method, path, location", [
    ("GET", "/docs", "/docs/"),
    ("GET", "/docs?lang=en&x=%2F", "/docs/?lang=en&x=%2F"),
    ("GET", "/docs//", "/docs/"),
    ("DELETE", "/plants//5", "/plants/5"),
    # A path werkzeug would write as a scheme-relative //evil.example/...
    ("GET", "//evil.example/docs", "/docs/"),
])
def test_a_redirect_is_a_path_whatever_the_host_header(client, method, path, location):
    response = client.open(path, method=method, headers=HOSTILE_HOST)
    assert response.status_code == 308
    assert response.headers["Location"] == location
    assert response.content_type == "application/json"
    assert response.get_json() == {"error": 308,
                                   "message": f"This resource is served at {location}."}


def test_head_of_a_redirect_has_its_location_and_no_body(client):
    response = client.head("/docs", headers=HOSTILE_HOST)
    assert (response.status_code, response.headers["Location"]) == (308, "/docs/")
    assert response.data == b""


@pytest.mark.parametrize("path, allowed", [
    ("/docs", {"GET", "HEAD", "OPTIONS"}),
    ("/plants//5", {"DELETE", "OPTIONS"}),
])
def test_options_of_a_redirected_path_answers_as_its_target(client, path, allowed):
    # A CORS preflight follows no redirect.
    response = client.options(path, headers=HOSTILE_HOST)
    assert response.status_code == 200
    assert set(response.headers["Allow"].split(", ")) == allowed
    assert "Location" not in response.headers and "Content-Type" not in response.headers


@pytest.mark.app_config({"TRUSTED_PROXIES": 1})
def test_a_redirect_behind_a_trusted_proxy_keeps_its_prefix_not_its_host(client):
    response = client.get("/docs", headers={"X-Forwarded-Prefix": "/store",
                                            "X-Forwarded-Host": "proxy.example",
                                            **HOSTILE_HOST})
    assert (response.status_code, response.headers["Location"]) == (308, "/store/docs/")


def test_a_redirected_delete_followed_deletes(client, alice):
    created = client.post("/plants", json={"id": 5, "name": "fern"}, headers=bearer(alice))
    assert created.status_code == 200
    response = client.delete("/plants//5", headers=bearer(alice), follow_redirects=True)
    assert response.status_code == 204
    assert client.delete("/plants/5", headers=bearer(alice)).status_code == 404


@pytest.mark.slow
def test_gunicorn_answers_a_hostile_host_with_a_path(gunicorn_server):
    server = gunicorn_server(workers=1)
    response = requests.get(server.url + "/docs", headers=HOSTILE_HOST,
                            allow_redirects=False, timeout=10)
    assert response.status_code == 308
    assert response.headers["Location"] == "/docs/"
    assert response.json() == {"error": 308, "message": "This resource is served at /docs/."}
    options = requests.options(server.url + "/docs", headers=HOSTILE_HOST, timeout=10)
    assert options.status_code == 200 and "Location" not in options.headers
    followed = requests.get(server.url + "/docs", timeout=10)
    assert followed.status_code == 200 and followed.url == server.url + "/docs/"
    assert "swagger-ui" in followed.text
