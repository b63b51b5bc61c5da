"""Links into the portal: minted by a token or the CLI, opened once, by the
entry page's form: fetching a link (a mail scanner, a preview) spends nothing."""
import threading

import pytest

from helpers import assert_error, bearer
from plantstore.db import clock
from plantstore.db.models import PortalLink, PortalSession
from plantstore.observability.logs import redact
from plantstore.portal.links import LINK_COOKIE
from plugins.portal import PUBLIC_URL, csrf_of, mint, open_link


def test_a_link_is_built_from_the_configured_url_never_the_requests_host(client, alice):
    response = client.post("/webhooks/portal-links", json={"read_only": True},
                           headers={**bearer(alice), "Host": "evil.example"})
    assert response.status_code == 201
    body = response.get_json()
    assert list(body) == ["url", "expires_at"]
    assert body["url"].startswith(PUBLIC_URL + "/portal/enter/plk_")
    assert "evil" not in body["url"]
    assert PortalLink.get().read_only
    key = body["url"].rsplit("/", 1)[1]
    assert PortalLink.select().where(PortalLink.digest == key).count() == 0  # a hash only


@pytest.mark.parametrize("body", [{"ttl_seconds": 86401}, {"ttl_seconds": 59},
                                  {"ttl_seconds": "900"}, {"read_only": "maybe"},
                                  {"scope": "all"}, []])
def test_a_bad_body_is_a_400_in_the_contracts_shape(client, alice, body):
    response = client.post("/webhooks/portal-links", json=body, headers=bearer(alice))
    assert_error(response, 400)
    assert PortalLink.select().count() == 0


def test_minting_needs_the_webhooks_write_scope(client, make_token):
    reader = make_token("carol", scopes=["webhooks:read"])
    assert_error(client.post("/webhooks/portal-links", json={}, headers=bearer(reader)), 403)
    assert_error(client.post("/webhooks/portal-links", json={}), 401)


@pytest.mark.app_config({"PORTAL_URL": ""})
def test_with_the_portal_off_the_route_is_a_404_and_so_is_every_page(client, alice):
    response = client.post("/webhooks/portal-links", json={}, headers=bearer(alice))
    assert_error(response, 404)
    assert "PLANTSTORE_PORTAL_URL" in response.get_json()["message"]
    for path in ("/portal/endpoints", "/portal/enter/plk_x", "/portal/static/portal.css"):
        page = client.get(path)
        assert page.status_code == 404 and "not enabled" in page.text


def test_a_link_leaves_for_a_clean_url_and_its_page_opens_the_portal_once(client, alice):
    path = mint(client, alice)
    key = path.rsplit("/", 1)[1]
    fetched = client.get(path)
    assert fetched.status_code == 303
    assert fetched.headers["Location"] == "/portal/enter"
    assert fetched.headers["Referrer-Policy"] == "no-referrer"
    [cookie] = fetched.headers.getlist("Set-Cookie")
    assert cookie.startswith(f"{LINK_COOKIE}={key};")
    assert {"HttpOnly", "Path=/portal/enter", "SameSite=Lax"} <= {
        part.strip() for part in cookie.split(";")}
    page = client.get("/portal/enter")
    assert page.status_code == 200 and "alice" in page.text and key not in page.text
    assert PortalLink.get().used_at is None and PortalSession.select().count() == 0

    entered = client.post("/portal/enter", data={"csrf_token": csrf_of(page)})
    assert entered.status_code == 303
    assert entered.headers["Location"] == "/portal/endpoints"
    assert any(cookie.startswith(f"{LINK_COOKIE}=;")
               for cookie in entered.headers.getlist("Set-Cookie"))  # the key forgotten
    assert client.get("/portal/endpoints").status_code == 200
    again = client.get(path)
    assert again.status_code == 410
    assert "already used" in again.text
    assert PortalSession.select().count() == 1


def test_a_mail_scanner_fetching_the_link_and_its_page_spends_nothing(app, client, alice):
    path = mint(client, alice)
    scanner = app.test_client()
    assert scanner.head(path).status_code == 303
    assert scanner.get(path, follow_redirects=True).status_code == 200  # the entry page
    assert scanner.get("/portal/enter").status_code == 200
    assert PortalLink.get().used_at is None and PortalSession.select().count() == 0

    csrf = open_link(client, path)  # the owner, later
    assert client.post("/portal/enter", data={"csrf_token": csrf}).status_code == 303
    assert client.get("/portal/endpoints").status_code == 200


def test_the_entry_page_without_a_link_says_to_open_the_link_again(client, alice):
    for answer in (client.get("/portal/enter"), client.post("/portal/enter")):
        assert answer.status_code == 400 and "Open your link again" in answer.text
    assert PortalSession.select().count() == 0


@pytest.mark.parametrize("post", [
    lambda client, csrf: client.post("/portal/enter"),
    lambda client, csrf: client.post("/portal/enter", data={"csrf_token": "forged"}),
    lambda client, csrf: client.post("/portal/enter", data={"csrf_token": csrf},
                                     headers={"Sec-Fetch-Site": "cross-site"}),
])
def test_an_entry_without_its_pages_token_or_from_another_site_spends_nothing(
        client, alice, post):
    csrf = open_link(client, mint(client, alice))
    refused = post(client, csrf)
    assert refused.status_code == 403 and "not accepted" in refused.text
    assert PortalLink.get().used_at is None and PortalSession.select().count() == 0
    assert client.post("/portal/enter", data={"csrf_token": csrf}).status_code == 303


def test_one_links_page_never_spends_another_link(client, alice):
    first_page_csrf = open_link(client, mint(client, alice))
    open_link(client, mint(client, alice))  # the browser now holds the second key
    refused = client.post("/portal/enter", data={"csrf_token": first_page_csrf})
    assert refused.status_code == 403
    assert PortalLink.select().where(PortalLink.used_at.is_null()).count() == 2


def test_an_expired_link_is_a_page_saying_so(client, alice):
    path = mint(client, alice)
    PortalLink.update(expires_at=clock.before(1)).execute()  # by the database's clock
    response = client.get(path)
    assert response.status_code == 410
    assert "expired" in response.text
    assert PortalSession.select().count() == 0


def test_a_link_that_expires_while_its_page_is_open_opens_nothing(client, alice):
    csrf = open_link(client, mint(client, alice))
    PortalLink.update(expires_at=clock.before(1)).execute()
    response = client.post("/portal/enter", data={"csrf_token": csrf})
    assert response.status_code == 410 and "expired" in response.text
    assert PortalSession.select().count() == 0
    assert client.get("/portal/enter").status_code == 400  # the key forgotten


@pytest.mark.parametrize("change", [lambda key: key[:-1] + ("A" if key[-1] != "A" else "B"),
                                    lambda key: key[:10], lambda key: "pst_" + key[4:],
                                    lambda key: key + "%00", lambda key: "x" * 5000])
def test_a_tampered_or_guessed_link_is_a_404_page_never_a_500(client, alice, change):
    path = mint(client, alice)
    key = path.rsplit("/", 1)[1]
    response = client.get("/portal/enter/" + change(key))
    assert response.status_code == 404
    assert "not valid" in response.text or "Not found" in response.text
    assert PortalSession.select().count() == 0


@pytest.mark.app_config({"RATE_LIMIT": "5/minute"})
def test_guessing_links_is_rate_limited_by_the_apis_limits(client):
    statuses = [client.get(f"/portal/enter/plk_guess{n}").status_code for n in range(7)]
    assert statuses[:5] == [404] * 5
    refused = client.get("/portal/enter/plk_guess8")
    assert refused.status_code == 429
    assert refused.mimetype == "text/html" and "Too many requests" in refused.text
    assert refused.headers["Retry-After"]


def test_two_entries_at_once_start_one_session(app, alice):
    path = mint(app.test_client(), alice)
    openers = [app.test_client() for _ in range(2)]
    tokens = [open_link(opener, path) for opener in openers]
    barrier, statuses = threading.Barrier(2), []

    def enter(opener, csrf):
        barrier.wait(timeout=30)
        statuses.append(opener.post("/portal/enter", data={"csrf_token": csrf}).status_code)

    threads = [threading.Thread(target=enter, args=pair) for pair in zip(openers, tokens)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(statuses) == [303, 410]
    assert PortalSession.select().count() == 1


def test_a_link_whose_token_is_revoked_opens_nothing(client, runner, alice):
    path = mint(client, alice)
    assert runner.invoke(args=["tokens", "revoke", "1"]).exit_code == 0
    response = client.get(path)
    assert response.status_code == 410 and "withdrawn" in response.text
    assert client.get("/portal/endpoints").status_code == 403


def test_the_cli_prints_a_link_that_opens_the_portal(client, runner, alice):
    result = runner.invoke(args=["portal", "link", "alice", "--read-only", "--ttl", "15m"])
    assert result.exit_code == 0, result.output
    url = result.stdout.strip()
    assert url.startswith(PUBLIC_URL + "/portal/enter/plk_")
    csrf = open_link(client, url[len(PUBLIC_URL):])
    assert client.post("/portal/enter", data={"csrf_token": csrf}).status_code == 303
    assert PortalSession.get().read_only


@pytest.mark.parametrize("args", [["portal", "link", "nobody"],
                                  ["portal", "link", "alice", "--ttl", "25h"],
                                  ["portal", "link", "alice", "--ttl", "soon"]])
def test_the_cli_refuses_bad_arguments_in_one_line(runner, alice, args):
    result = runner.invoke(args=args)
    assert result.exit_code in (1, 2)
    assert "Traceback" not in result.output


def test_a_links_key_is_masked_in_log_lines():
    line = "GET /portal/enter/plk_bTrMFb5uRv_SzxtCi9o45FL3iNnkc0GoRfiq5UsEcuM 303"
    assert redact(line) == "GET /portal/enter/[REDACTED] 303"
    assert "pps_" not in redact("cookie plantstore_portal=pps_abcDEF123")
