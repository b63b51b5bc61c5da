"""What the portal's tests share: the settings that turn it on, and ways in."""
import re

from helpers import bearer
from plantstore.db.models import Subscription

PUBLIC_URL = "https://plants.example.com"
PORTAL = {"PORTAL_URL": PUBLIC_URL, "PORTAL_SECRET_KEY": "k" * 40,
          "WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8"}
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def mint(client, token, **body):
    """A link's path (under the public URL) minted by ``token``."""
    response = client.post("/webhooks/portal-links", json=body, headers=bearer(token))
    assert response.status_code == 201, response.get_json()
    url = response.get_json()["url"]
    assert url.startswith(PUBLIC_URL + "/portal/enter/plk_")
    return url[len(PUBLIC_URL):]


def open_link(client, path, **request):
    """Fetch a link, as a browser does: the link, then the entry page it
    leads to; that page's CSRF token."""
    response = client.get(path, **request)
    assert response.status_code == 303 and response.headers["Location"] == "/portal/enter"
    return csrf_of(client.get("/portal/enter", **request))


def entered(client, path, **request):
    """Open the link at ``path`` and send its entry page's form; the form's answer."""
    return client.post("/portal/enter", data={"csrf_token": open_link(client, path, **request)},
                       **request)


def enter(client, token, **body):
    """Sign ``client`` in by a new link of ``token``'s user; the page's CSRF token."""
    response = entered(client, mint(client, token, **body))
    assert response.status_code == 303, response.text
    return csrf_of(client.get("/portal/endpoints"))


def set_cookie_header(response, name):
    """The ``Set-Cookie`` header of ``response`` for cookie ``name``."""
    [header] = [header for header in response.headers.getlist("Set-Cookie")
                if header.startswith(f"{name}=")]
    return header


def csrf_of(response):
    assert response.status_code == 200, response.text
    return CSRF.search(response.text).group(1)


def add_endpoint(client, csrf, url="http://127.0.0.1:9/hook", **fields):
    """Add an endpoint through the portal's form; its id."""
    response = client.post("/portal/endpoints/new", data={
        "csrf_token": csrf, "url": url, "bearer": "", "rate_limit": "", **fields})
    assert response.status_code == 201, response.text
    return Subscription.select().order_by(Subscription.id.desc()).first().id
