"""No portal link key and no session cookie value in any line a real
gunicorn and the app write, its access log included."""
import pytest
import requests

from helpers import bearer
from plugins.portal import PUBLIC_URL, csrf_of

PORTAL_ENV = {"PLANTSTORE_PORTAL_URL": PUBLIC_URL, "PLANTSTORE_PORTAL_SECRET_KEY": "k" * 40}


@pytest.mark.slow
@pytest.mark.parametrize("line_format", ["json", "text"])
def test_no_link_key_or_session_cookie_reaches_a_log_line(gunicorn_server, alice, line_format):
    server = gunicorn_server(workers=1, env={**PORTAL_ENV, "PLANTSTORE_LOG_FORMAT": line_format})
    minted = requests.post(server.url + "/webhooks/portal-links", json={},
                           headers=bearer(alice), timeout=10)
    assert minted.status_code == 201
    path = minted.json()["url"][len(PUBLIC_URL):]
    key = path.rsplit("/", 1)[1]
    browser = requests.Session()
    opened = browser.get(server.url + path, allow_redirects=False, timeout=10)
    assert opened.status_code == 303
    page = browser.get(server.url + "/portal/enter", timeout=10)  # the key in its cookie
    entered = browser.post(server.url + "/portal/enter", data={"csrf_token": csrf_of(page)},
                           allow_redirects=False, timeout=10)
    assert entered.status_code == 303
    cookie = browser.cookies["plantstore_portal"]
    assert browser.get(server.url + "/portal/endpoints", timeout=10).status_code == 200
    again = requests.get(server.url + path, timeout=10)  # used: a page, logged as 410
    assert again.status_code == 410
    assert requests.get(server.url + path + "?again=" + key, timeout=10).status_code == 410
    assert requests.get(server.url + "/portal/nowhere/" + cookie, timeout=10).status_code == 404
    server.stop()
    lines = server.output().splitlines()
    assert [line for line in lines if "/portal/enter/" in line], lines  # access lines written
    for secret in (key, key[len("plk_"):], cookie, cookie[len("pps_"):]):
        assert not [line for line in lines if secret in line], secret
