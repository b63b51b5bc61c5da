"""Every JSON answer is written in one style, the README's:
``{"name": "Fern", "tag": "green"}`` (a space after ``:`` and ``,``, no
trailing newline, ASCII). The walk below calls every route of the app, as
its owner, as nobody and with bad input, and fails on a route it does not
know, so a new route is walked too."""
import json

import pytest
import requests

from helpers import bearer, create_plant
from plugins.webhooks import PATIENT_SENDS

pytestmark = pytest.mark.app_config({**PATIENT_SENDS,
                                     "WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8"})

# Answers that are not JSON, or a document rather than an answer.
NOT_ANSWERS = {
    "/metrics",                 # Prometheus text
    "/docs/", "/docs/<path:path>",   # Swagger UI's page and files
    "/openapi.json",            # the OpenAPI document, indented to be read
    "/static/<path:filename>",
}
"""Besides these, the portal's pages (``/portal/``) are HTML: tests/portal."""


def in_the_one_style(body):
    """True when ``body`` is exactly how the one style writes its value."""
    return body == json.dumps(json.loads(body)).encode()


def calls(token, subscription_id, receiver_url):
    """(rule, method) → the requests that exercise it: answered, refused, malformed."""
    auth, json_type = bearer(token), {"Content-Type": "application/json"}
    hook = f"/webhooks/{subscription_id}"
    return {
        ("/healthz", "GET"): [("GET", "/healthz", {}, None)],
        ("/readyz", "GET"): [("GET", "/readyz", {}, None)],
        ("/plants", "GET"): [("GET", "/plants", auth, None), ("GET", "/plants", {}, None),
                             ("GET", "/plants?limit=x", auth, None)],
        ("/plants", "POST"): [
            ("POST", "/plants", {**auth, **json_type}, '{"id": 9, "name": "Fern", "tag": "é"}'),
            ("POST", "/plants", {**auth, **json_type}, '{"id": 9, "name": "Fern"}'),
            ("POST", "/plants", {**auth, **json_type}, "[1]"),
            ("POST", "/plants", {**auth, **json_type}, "{"),
            ("POST", "/plants", auth, "x"),
            ("PUT", "/plants", auth, None)],
        ("/plants/<plant_id:id>", "DELETE"): [
            ("DELETE", "/plants/x", auth, None), ("DELETE", "/plants/12345", auth, None),
            ("DELETE", "/plants/9", {}, None)],
        ("/webhooks", "GET"): [("GET", "/webhooks", auth, None)],
        ("/webhooks", "POST"): [
            ("POST", "/webhooks", {**auth, **json_type}, json.dumps({"url": receiver_url})),
            ("POST", "/webhooks", {**auth, **json_type}, '{"url": "ftp://x"}')],
        ("/webhooks/<row_id:id>", "GET"): [("GET", hook, auth, None),
                                           ("GET", "/webhooks/0", auth, None)],
        ("/webhooks/<row_id:id>/test", "POST"): [("POST", f"{hook}/test", auth, None)],
        ("/webhooks/<row_id:id>/deliveries", "GET"): [
            ("GET", f"{hook}/deliveries", auth, None),
            ("GET", f"{hook}/deliveries?status=x", auth, None)],
        ("/webhooks/<row_id:id>/rotate-secret", "POST"): [
            ("POST", f"{hook}/rotate-secret", auth, None)],
        ("/webhooks/<row_id:id>/enable", "POST"): [("POST", f"{hook}/enable", auth, None)],
        ("/webhooks/<row_id:id>/disable", "POST"): [("POST", "/webhooks/999/disable", auth, None)],
        ("/webhooks/<row_id:id>/deliveries/<delivery_id:delivery_id>", "GET"): [
            ("GET", f"{hook}/deliveries/1", auth, None),
            ("GET", f"{hook}/deliveries/x", auth, None)],
        ("/webhooks/<row_id:id>/deliveries/<delivery_id:delivery_id>/resend", "POST"): [
            ("POST", f"{hook}/deliveries/999/resend", auth, None)],
        ("/webhooks/portal-links", "POST"): [
            ("POST", "/webhooks/portal-links", {**auth, **json_type}, '{"ttl_seconds": 1}'),
            ("POST", "/webhooks/portal-links", {**auth, **json_type}, "{}")],
        ("/webhooks/<row_id:id>/recover", "POST"): [
            ("POST", f"{hook}/recover", {**auth, **json_type},
             '{"since": "2026-01-31T09:00:00Z"}'),
            ("POST", f"{hook}/recover", {**auth, **json_type}, '{"since": "yesterday"}')],
        ("/webhooks/<row_id:id>", "PATCH"): [
            ("PATCH", hook, {**auth, **json_type}, '{"rate_limit": 5}'),
            ("PATCH", hook, {**auth, **json_type}, '{"rate_limit": 0}'),
            ("PATCH", hook, {**auth, **json_type}, "{}")],
        ("/webhooks/<row_id:id>", "DELETE"): [
            ("DELETE", "/webhooks/999", auth, None), ("DELETE", hook, auth, None)],
    }


def test_every_json_answer_of_every_route_is_in_the_one_style(
        app, client, alice, make_receiver):
    receiver = make_receiver()
    create_plant(client, alice, 1)
    created = client.post("/webhooks", json={"url": receiver.url}, headers=bearer(alice))
    assert created.status_code == 201, created.data
    walk = calls(alice, created.get_json()["id"], receiver.url)

    routes = {(rule.rule, method) for rule in app.url_map.iter_rules()
              if rule.rule not in NOT_ANSWERS and not rule.rule.startswith("/portal/")
              for method in rule.methods - {"HEAD", "OPTIONS"}}
    assert routes == set(walk), "walk every route: " + repr(routes ^ set(walk))

    statuses = set()
    for route, requests_of_route in walk.items():
        for method, url, headers, body in requests_of_route:
            response = client.open(url, method=method, headers=headers, data=body)
            if response.status_code == 204:
                continue
            assert response.mimetype == "application/json", (route, response.data)
            assert in_the_one_style(response.data), (route, url, response.data)
            statuses.add(response.status_code)
    assert {200, 201, 202, 400, 401, 404, 405, 409, 415} <= statuses, statuses


@pytest.mark.slow
def test_answers_gunicorn_writes_itself_are_in_the_one_style(gunicorn_server, alice):
    server = gunicorn_server(workers=1)
    too_long = requests.get(server.url + "/plants?x=" + "a" * 10_000, timeout=10)
    health = requests.get(server.url + "/healthz", timeout=10)
    listed = requests.get(server.url + "/plants", headers=bearer(alice), timeout=10)
    for response in (too_long, health, listed):
        assert in_the_one_style(response.content), response.content
    assert health.content == b'{"status": "ok"}'
