"""What the portal answers when it cannot serve: the database away, an
address that is not a page, a spent rate limit: each a page with the
portal's headers, never JSON and never a traceback."""
import logging

import pytest

from helpers import free_port, wait_until
from plantstore import create_app, db
from plantstore.db.models import User
from plantstore.web.auth import issue_token
from plugins.portal import PORTAL, enter


def assert_portal_page(response, status):
    """A page of the portal's, with its status and every header of its pages."""
    assert response.status_code == status
    assert response.mimetype == "text/html", response.text
    assert response.text.count("<h1>") == 1 and "Traceback" not in response.text
    assert "default-src 'none'" in response.headers["Content-Security-Policy"]
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Referrer-Policy"] == "no-referrer"
    assert response.headers["Cache-Control"] == "no-store"


def assert_unavailable_page(response):
    assert_portal_page(response, 503)
    assert int(response.headers["Retry-After"]) > 0
    assert "try again" in response.text


@pytest.mark.parametrize("url", [f"postgresql://postgres@127.0.0.1:{free_port()}/nothing",
                                 "sqlite:////nonexistent-directory/plantstore.db"],
                         ids=["postgresql", "sqlite"])
def test_every_portal_page_is_a_503_page_while_the_database_is_unreachable(url, caplog):
    client = create_app({"TESTING": True, "DATABASE_URL": url, **PORTAL}).test_client()
    client.set_cookie("plantstore_portal", "pps_" + "x" * 43, path="/portal")
    with caplog.at_level(logging.WARNING):
        for path in ("/portal/endpoints", "/portal/deliveries", "/portal/deliveries/1",
                     "/portal/enter/plk_" + "y" * 43):
            assert_unavailable_page(client.get(path))
        assert_unavailable_page(client.post("/portal/logout", data={"csrf_token": "x"}))
    assert not [record for record in caplog.records if record.exc_info]


@pytest.mark.slow
def test_a_session_whose_database_goes_away_sees_a_503_page_then_its_pages_again(
        throwaway_postgres):
    app = create_app({"TESTING": True, "DATABASE_URL": throwaway_postgres.url, **PORTAL})
    with app.app_context():
        db.upgrade()
        with db.database.atomic():
            _, token = issue_token(User.create(name="alice"))
    client = app.test_client()
    enter(client, token)
    throwaway_postgres.stop()
    assert_unavailable_page(client.get("/portal/endpoints"))
    throwaway_postgres.start()
    wait_until(lambda: client.get("/portal/endpoints").status_code == 200, timeout=30,
               interval=0.2, message="the portal serving again after the restart")
    assert "You have no endpoints yet" in client.get("/portal/endpoints").text


@pytest.mark.parametrize("signed_in", [False, True], ids=["signed-out", "signed-in"])
@pytest.mark.parametrize("path", ["/portal/nowhere", "/portal/endpoints/x/edit",
                                  "/portal/deliveries/0", "/portal/static/nothing.css"])
def test_an_unknown_address_is_a_404_page_signed_in_or_not(client, alice, signed_in, path):
    if signed_in:
        enter(client, alice)
    response = client.get(path)
    assert response.status_code == 404, response.text
    assert response.mimetype == "text/html" and "Not found" in response.text


@pytest.mark.app_config({"RATE_LIMIT": "3/minute"})
def test_the_stylesheet_is_not_counted_against_the_rate_limit(client):
    for _ in range(6):
        response = client.get("/portal/static/portal.css")
        assert response.status_code == 200 and response.mimetype == "text/css"
        assert "X-RateLimit-Remaining" not in response.headers
    assert client.get("/portal/enter/plk_guess").status_code == 404


@pytest.mark.app_config({"RATE_LIMIT": "2/minute"})
def test_a_rate_limited_portal_request_is_a_page(client):
    for _ in range(2):
        client.get("/portal/endpoints")
    refused = client.get("/portal/endpoints")
    assert_portal_page(refused, 429)
    assert "Too many requests" in refused.text and int(refused.headers["Retry-After"]) > 0
