"""The portal against an attacker, once more: parameters that would build a
link or a redirect elsewhere, a ``javascript:`` endpoint URL, a stolen
digest as a cookie, and a read-only session on every POST route."""
import re

import pytest
from playhouse.shortcuts import model_to_dict

from helpers import bearer
from plantstore.db.models import Attempt, Delivery, PortalSession, Subscription
from plantstore.webhooks.engine import queue
from plugins.portal import add_endpoint, enter

HOSTILE_QUERY = ("next=https://evil.example/&return_to=//evil.example&redirect=https://evil."
                 "example&_external=1&_scheme=javascript&_anchor=x&_method=POST"
                 "&url=javascript:alert(1)&x=%0aalert(1)")
LINKS = re.compile(r'(?:href|action)="([^"]*)"')
JAVASCRIPT_URLS = ["javascript:alert(1)", "JavaScript://example.com/%0aalert(1)",
                   " javascript:alert(1)", "data:text/html,<script>alert(1)</script>",
                   "http://127.0.0.1:9/x\njavascript:alert(1)"]


def assert_links_stay_in_the_portal(text):
    for link in LINKS.findall(text):
        assert link.startswith("/portal/") or link == "#main", link


@pytest.fixture
def alices(client, alice):
    """Alice signed in, with an endpoint and more deliveries than a page holds."""
    csrf = enter(client, alice)
    subscription_id = add_endpoint(client, csrf)
    deliveries = [queue.enqueue_test_event(subscription_id) for _ in range(26)]
    Attempt.create(delivery=deliveries[0].id, status_code=500, duration_ms=3)
    return csrf, subscription_id, deliveries[0].id


def test_no_query_parameter_makes_a_link_or_a_redirect_leave_the_portal(client, alices):
    csrf, subscription_id, delivery_id = alices
    for path in ("/portal/endpoints", "/portal/deliveries", "/portal/endpoints/new",
                 f"/portal/deliveries/{delivery_id}", f"/portal/endpoints/{subscription_id}/edit",
                 f"/portal/endpoints/{subscription_id}/recover", "/portal/nowhere", "/portal/"):
        response = client.get(f"{path}?{HOSTILE_QUERY}")
        assert response.status_code in (200, 303, 404), path
        assert_links_stay_in_the_portal(response.text)
        assert response.headers.get("Location", "/portal/").startswith("/portal/"), path
    older = re.search(r'id="older" href="([^"]+)"', client.get(
        f"/portal/deliveries?status=pending&{HOSTILE_QUERY}").text).group(1)
    assert older.startswith("/portal/deliveries?status=pending&amp;before="), older
    for action in ("disable", "enable", "test"):
        response = client.post(f"/portal/endpoints/{subscription_id}/{action}?{HOSTILE_QUERY}",
                               data={"csrf_token": csrf, "next": "https://evil.example/"})
        assert response.status_code == 303
        assert response.headers["Location"].startswith("/portal/"), action


@pytest.mark.parametrize("url", JAVASCRIPT_URLS)
def test_a_javascript_url_is_refused_by_the_form_and_the_api_and_never_a_link(
        client, alices, alice, url):
    csrf, subscription_id, _ = alices
    added = client.post("/portal/endpoints/new", data={"csrf_token": csrf, "url": url})
    assert added.status_code == 400 and 'class="error"' in added.text
    edited = client.post(f"/portal/endpoints/{subscription_id}/edit",
                         data={"csrf_token": csrf, "url": url})
    assert edited.status_code == 400 and 'class="error"' in edited.text
    assert client.post("/webhooks", json={"url": url},
                       headers=bearer(alice)).status_code == 400
    assert [s.url for s in Subscription.select()] == ["http://127.0.0.1:9/hook"]
    for response in (added, edited):
        assert_links_stay_in_the_portal(response.text)


def test_a_stored_javascript_url_is_shown_as_text_never_as_a_link(client, alices):
    _, subscription_id, delivery_id = alices
    Subscription.update(url="javascript:alert(1)").execute()  # a row may hold anything
    for path in ("/portal/endpoints", "/portal/deliveries", f"/portal/deliveries/{delivery_id}",
                 f"/portal/endpoints/{subscription_id}/edit",
                 f"/portal/endpoints/{subscription_id}/delete"):
        text = client.get(path).text
        assert "javascript:alert(1)" in text, path
        assert_links_stay_in_the_portal(text)


def test_the_stored_digest_of_a_session_is_no_cookie(app, client, alices):
    stolen = PortalSession.get().digest  # what a leaked database copy shows
    other = app.test_client()
    for value in (stolen, "pps_" + stolen):
        other.set_cookie("plantstore_portal", value, path="/portal")
        assert other.get("/portal/endpoints").status_code == 403


def _snapshot():
    """Every row a change could touch, but the sessions' last use."""
    return ([model_to_dict(row, recurse=False) for row in Subscription.select()],
            [model_to_dict(row, recurse=False) for row in Delivery.select()],
            [model_to_dict(row, recurse=False) for row in Attempt.select()])


def test_a_read_only_session_changes_nothing_on_any_post_route(app, client, alices, alice):
    _, subscription_id, delivery_id = alices
    Delivery.update(status=Delivery.FAILED).where(Delivery.id == delivery_id).execute()
    reader = app.test_client()
    csrf = enter(reader, alice, read_only=True)
    before = _snapshot()
    posts = [rule.rule.replace("<int(min=1, max=2147483647):subscription_id>",
                               str(subscription_id))
             .replace("<int(min=1, max=9223372036854775807):delivery_id>", str(delivery_id))
             for rule in app.url_map.iter_rules()
             if rule.endpoint.startswith("portal.") and "POST" in rule.methods
             and rule.endpoint not in ("portal.logout", "portal.enter", "portal.anything_else")]
    assert len(posts) == 9, posts  # every change the pages offer
    for path in posts:
        assert "<" not in path, path
        response = reader.post(path, data={
            "csrf_token": csrf, "url": "http://127.0.0.1:9/x", "bearer": "b", "rate_limit": "1",
            "since": "2020-01-01T00:00"})
        assert response.status_code == 403 and response.mimetype == "text/html", path
        assert "read-only" in response.text, path
    assert _snapshot() == before
    assert reader.get("/portal/endpoints").status_code == 200  # still signed in


def test_a_second_session_cookie_planted_beside_the_users_is_trusted_by_neither(
        app, client, alices, bob):
    """Cookie tossing: a sibling subdomain sets its own session's cookie on a
    longer path, which the browser sends first: the user would act in the
    attacker's account."""
    csrf, subscription_id, _ = alices
    own = client.get_cookie("plantstore_portal", path="/portal").value
    attacker = app.test_client()
    enter(attacker, bob)
    planted = attacker.get_cookie("plantstore_portal", path="/portal").value
    browser = app.test_client(use_cookies=False)  # sends the Cookie header as given
    both = {"Cookie": f"plantstore_portal={planted}; plantstore_portal={own}"}
    page = browser.get("/portal/endpoints", headers=both)
    assert page.status_code == 403 and "not signed in" in page.text
    refused = browser.post(f"/portal/endpoints/{subscription_id}/disable",
                          data={"csrf_token": csrf}, headers=both)
    assert refused.status_code == 403
    assert Subscription.get_by_id(subscription_id).is_active
    assert browser.get("/portal/endpoints", headers={
        "Cookie": f"plantstore_portal={own}"}).status_code == 200
