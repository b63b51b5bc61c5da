"""Portal sessions: the cookie, fixation, and every way a session ends."""
import pytest

from plantstore.db import clock
from plantstore.db.models import PortalSession
from plantstore.portal.links import LINK_COOKIE
from plugins.portal import enter, entered, mint, set_cookie_header


def test_the_cookie_is_httponly_samesite_lax_scoped_and_not_secure_over_http(client, alice):
    cookie = set_cookie_header(entered(client, mint(client, alice)), "plantstore_portal")
    assert cookie.startswith("plantstore_portal=pps_")
    for flag in ("HttpOnly", "SameSite=Lax", "Path=/portal"):
        assert flag in cookie
    assert "Secure" not in cookie


def test_the_cookies_are_secure_over_https(client, alice):
    https = {"base_url": "https://plants.example.com"}
    link = client.get(mint(client, alice), **https)
    assert "Secure" in set_cookie_header(link, LINK_COOKIE)
    response = entered(client, mint(client, alice), **https)
    assert "Secure" in set_cookie_header(response, "plantstore_portal")


@pytest.mark.app_config({"TRUSTED_PROXIES": 1})
def test_the_cookies_are_secure_when_the_trusted_proxy_says_https(client, alice):
    https = {"headers": {"X-Forwarded-Proto": "https"}}
    link = client.get(mint(client, alice), **https)
    assert "Secure" in set_cookie_header(link, LINK_COOKIE)
    response = entered(client, mint(client, alice), **https)
    assert "Secure" in set_cookie_header(response, "plantstore_portal")


def test_a_session_id_offered_before_entry_is_never_kept(client, alice):
    client.set_cookie("plantstore_portal", "pps_chosen_by_an_attacker", path="/portal")
    response = entered(client, mint(client, alice))
    assert "pps_chosen_by_an_attacker" not in set_cookie_header(response, "plantstore_portal")
    assert client.get("/portal/endpoints").status_code == 200


def test_entering_again_ends_the_session_the_browser_held(client, alice):
    enter(client, alice)
    first = PortalSession.get()
    enter(client, alice)
    assert PortalSession.get_by_id(first.id).ended_at is not None


def test_logout_ends_the_session_on_the_server(client, alice):
    csrf = enter(client, alice)
    cookie = client.get_cookie("plantstore_portal", path="/portal").value
    response = client.post("/portal/logout", data={"csrf_token": csrf})
    assert response.status_code == 200 and "logged out" in response.text
    client.set_cookie("plantstore_portal", cookie, path="/portal")  # replayed
    assert client.get("/portal/endpoints").status_code == 403


def test_revoking_the_token_that_made_the_link_ends_its_sessions(client, runner, alice):
    enter(client, alice)
    assert runner.invoke(args=["tokens", "revoke", "1"]).exit_code == 0
    page = client.get("/portal/endpoints")
    assert page.status_code == 403 and "not signed in" in page.text


def test_portal_sessions_end_ends_a_users_sessions(app, client, runner, alice, bob):
    enter(client, alice)
    other = app.test_client()
    enter(other, bob)
    result = runner.invoke(args=["portal", "sessions", "end", "alice"])
    assert result.exit_code == 0 and "ended 1 portal session of alice" in result.output
    assert client.get("/portal/endpoints").status_code == 403
    assert other.get("/portal/endpoints").status_code == 200


@pytest.mark.parametrize("column, seconds", [("last_seen_at", 31 * 60),
                                             ("created_at", 12 * 3600 + 1)])
def test_an_idle_or_too_old_session_ends(client, alice, column, seconds):
    enter(client, alice)
    PortalSession.update({getattr(PortalSession, column): clock.before(seconds)}).execute()
    assert client.get("/portal/endpoints").status_code == 403


def test_a_page_writes_the_last_use_only_when_a_minute_old(client, alice):
    """Reading pages within the minute writes nothing; the first read after
    it moves the last use to now (by the database's clock)."""
    enter(client, alice)
    first = PortalSession.select(PortalSession.last_seen_at).scalar()
    assert client.get("/portal/endpoints").status_code == 200
    assert PortalSession.select(PortalSession.last_seen_at).scalar() == first
    PortalSession.update(last_seen_at=clock.before(5 * 60)).execute()
    aged = PortalSession.select(PortalSession.last_seen_at).scalar()
    assert client.get("/portal/endpoints").status_code == 200
    assert PortalSession.select(PortalSession.last_seen_at).scalar() > aged


def test_a_session_in_use_stays(client, alice):
    enter(client, alice)
    PortalSession.update(last_seen_at=clock.before(29 * 60)).execute()
    assert client.get("/portal/endpoints").status_code == 200
    assert client.get("/portal/deliveries").status_code == 200
