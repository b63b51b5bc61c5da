"""The portal against an attacker: CSRF, cross-site POSTs, read-only
sessions, other users' ids, hostile text, and the headers of every page."""
import pytest

from plantstore.db.models import Attempt, Delivery, Subscription
from plantstore.webhooks.engine import queue
from plantstore.webhooks.subscriptions import store
from portal_helpers import add_endpoint, enter

HOSTILE = '"><img src=x onerror=alert(1)><script>alert(2)</script>'


def _pages(subscription_id, delivery_id):
    return ["/portal/endpoints", "/portal/endpoints/new", "/portal/deliveries",
            f"/portal/endpoints/{subscription_id}/edit",
            f"/portal/endpoints/{subscription_id}/delete",
            f"/portal/endpoints/{subscription_id}/recover",
            f"/portal/deliveries/{delivery_id}", "/portal/nowhere"]


def _posts(subscription_id, delivery_id):
    return [f"/portal/endpoints/{subscription_id}/{action}" for action in
            ("edit", "disable", "enable", "delete", "rotate-secret", "test", "recover")] + [
        f"/portal/deliveries/{delivery_id}/resend"]


@pytest.fixture
def alices(client, alice):
    """Alice signed in, with an endpoint and a delivery: (csrf, subscription id, delivery id)."""
    csrf = enter(client, alice)
    subscription_id = add_endpoint(client, csrf)
    delivery = queue.enqueue_test_event(subscription_id)
    return csrf, subscription_id, delivery.id


def test_every_page_carries_the_security_headers(client, alices):
    _, subscription_id, delivery_id = alices
    for path in _pages(subscription_id, delivery_id):
        response = client.get(path)
        csp = response.headers["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp, path
        assert "script-src" not in csp and "unsafe-inline" not in csp
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert response.headers["Referrer-Policy"] == "no-referrer"
        assert response.headers["Cache-Control"] == "no-store", path
        assert response.text.count("<h1>") == 1 and "<main" in response.text
        assert "style=" not in response.text and "<script" not in response.text


@pytest.mark.app_config({"PORTAL_FRAME_ANCESTORS": "https://admin.example.com"})
def test_frame_ancestors_comes_from_its_setting(client, alices):
    csp = client.get("/portal/endpoints").headers["Content-Security-Policy"]
    assert "frame-ancestors https://admin.example.com" in csp


def test_another_users_ids_are_404_pages_on_every_page_and_form(app, client, alices, bob):
    _, subscription_id, delivery_id = alices
    mallory = app.test_client()
    csrf = enter(mallory, bob)
    for path in _pages(subscription_id, delivery_id)[3:]:
        assert mallory.get(path).status_code == 404, path
    assert "127.0.0.1:9/hook" not in mallory.get("/portal/endpoints").text
    assert "plant.test" not in mallory.get("/portal/deliveries").text
    assert mallory.get(f"/portal/deliveries?endpoint_id={subscription_id}").status_code == 400
    for path in _posts(subscription_id, delivery_id):
        response = mallory.post(path, data={"csrf_token": csrf, "url": "http://127.0.0.1:9/x",
                                            "since": "2020-01-01T00:00"})
        assert response.status_code == 404, path
        assert "Not found" in response.text
    assert Subscription.get_by_id(subscription_id).is_active
    assert Delivery.select().count() == 1


@pytest.mark.parametrize("sent", [{}, {"csrf_token": "forged"}, "other-session"])
def test_a_post_without_a_valid_csrf_token_is_refused_and_changes_nothing(
        app, client, alices, bob, sent):
    _, subscription_id, _ = alices
    if sent == "other-session":  # a valid token, of someone else's session
        sent = {"csrf_token": enter(app.test_client(), bob)}
    response = client.post(f"/portal/endpoints/{subscription_id}/disable", data=sent)
    assert response.status_code == 403 and "not accepted" in response.text
    assert Subscription.get_by_id(subscription_id).is_active


@pytest.mark.parametrize("site", ["cross-site", "same-site"])
def test_a_cross_site_post_is_refused_even_with_the_token(client, alices, site):
    csrf, subscription_id, _ = alices
    response = client.post(f"/portal/endpoints/{subscription_id}/disable",
                           data={"csrf_token": csrf}, headers={"Sec-Fetch-Site": site})
    assert response.status_code == 403
    assert Subscription.get_by_id(subscription_id).is_active
    same_origin = client.post(f"/portal/endpoints/{subscription_id}/disable",
                              data={"csrf_token": csrf},
                              headers={"Sec-Fetch-Site": "same-origin"})
    assert same_origin.status_code == 303
    assert not Subscription.get_by_id(subscription_id).is_active


def test_a_read_only_session_sees_every_page_and_changes_nothing(app, client, alices, alice):
    _, subscription_id, delivery_id = alices
    reader = app.test_client()
    csrf = enter(reader, alice, read_only=True)
    for path in _pages(subscription_id, delivery_id)[:3] + _pages(
            subscription_id, delivery_id)[6:7]:
        assert reader.get(path).status_code == 200, path
    assert "Rotate" not in reader.get("/portal/endpoints").text
    for path in _posts(subscription_id, delivery_id) + ["/portal/endpoints/new"]:
        response = reader.post(path, data={"csrf_token": csrf, "url": "http://127.0.0.1:9/x",
                                           "since": "2020-01-01T00:00"})
        assert response.status_code == 403 and "read-only" in response.text, path
    assert Subscription.select().count() == 1 and Subscription.get().is_active
    assert Delivery.select().count() == 1
    assert reader.post("/portal/logout", data={"csrf_token": csrf}).status_code == 200


def test_what_users_and_receivers_sent_is_escaped_on_every_page(client, alices):
    csrf, _, _ = alices
    # Stored as it is (the API refuses such a URL now; a row may hold anything).
    subscription_id = store.add(1, "http://127.0.0.1:9/" + HOSTILE, HOSTILE, None,
                                "whsec_x").id
    delivery = queue.enqueue_test_event(subscription_id)
    Attempt.create(delivery=delivery.id, status_code=500, duration_ms=3,
                   error=HOSTILE, response_body=HOSTILE + " javascript:alert(3)")
    Delivery.update(last_error=HOSTILE).where(Delivery.id == delivery.id).execute()
    for path in ("/portal/endpoints", "/portal/deliveries", f"/portal/deliveries/{delivery.id}",
                 f"/portal/endpoints/{subscription_id}/edit",
                 f"/portal/endpoints/{subscription_id}/delete"):
        text = client.get(path).text
        assert "<img" not in text and "<script" not in text, path
        assert "&lt;img src=x onerror=alert(1)&gt;" in text or "%3Cimg" in text, path
        assert 'href="javascript:' not in text


def test_bad_form_input_shows_the_form_again_never_a_500(client, alices):
    csrf, subscription_id, _ = alices
    for data in ({"url": "ftp://example.com"}, {"url": ""}, {"url": "http://10.0.0.1/x"},
                 {"url": "http://127.0.0.1:9/x", "rate_limit": "fast"},
                 {"url": "http://127.0.0.1:9/x", "rate_limit": "0"},
                 {"url": "http://127.0.0.1:9/x", "bearer": "a b\n"}):
        response = client.post("/portal/endpoints/new", data={"csrf_token": csrf, **data})
        assert response.status_code == 400, data
        assert 'class="error"' in response.text and "<form" in response.text
    for query in ("status=lost", "from=yesterday", "endpoint_id=999", "before=-1"):
        assert client.get(f"/portal/deliveries?{query}").status_code == 400, query
    response = client.post(f"/portal/endpoints/{subscription_id}/recover",
                           data={"csrf_token": csrf, "since": "last week"})
    assert response.status_code == 400
    assert Subscription.select().count() == 1
