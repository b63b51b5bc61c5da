"""The portal's defences that are not its sessions: CSRF tokens on every
form, cross-site POSTs refused, and the headers of every page.

CSRF is Flask-WTF's ``CSRFProtect``, applied to the portal's blueprint
only (``WTF_CSRF_CHECK_DEFAULT`` off; ``protect`` called by the portal's
gate), so the JSON API is never asked for a token. The raw token lives in
the portal session's row (``PortalSessionInterface`` hands it to Flask's
``session``, where Flask-WTF reads it), and is signed with
``PLANTSTORE_PORTAL_SECRET_KEY`` or a key derived from the first of
``PLANTSTORE_ENCRYPTION_KEYS``: every web process signs and checks alike.
Flask-WTF's HTTPS referrer check is off: the portal sends no ``Referer``
(``Referrer-Policy: no-referrer``); ``Sec-Fetch-Site`` and ``SameSite=Lax``
stand in for it.
"""
import hashlib
import hmac

from flask import request
from flask.sessions import SecureCookieSession, SessionInterface
from flask_wtf.csrf import CSRFError, CSRFProtect

PORTAL_PATH = "/portal/"
REFUSED_FETCH_SITES = ("cross-site", "same-site")
"""``Sec-Fetch-Site`` values whose POSTs are refused (a sibling subdomain is
another site's as far as the portal cares); ``same-origin`` and ``none``
(typed, bookmarked) pass, as do browsers that send no such header."""

csrf = CSRFProtect()


def signing_key(config):
    """The key CSRF tokens are signed with, the same on every web process."""
    if config["PORTAL_SECRET_KEY"]:
        return config["PORTAL_SECRET_KEY"]
    if config["ENCRYPTION_KEYS"]:
        return hmac.new(config["ENCRYPTION_KEYS"][0].encode(), b"plantstore portal csrf",
                        hashlib.sha256).hexdigest()
    return None  # the portal is off (settings refuse it on without a key)


class PortalSessionInterface(SessionInterface):
    """Flask's ``session``, for the portal only: a dict the portal's gate
    fills from its session row (the CSRF token); nothing goes to a cookie
    of Flask's own. Elsewhere, Flask's null session (the API has none)."""

    def open_session(self, app, request):
        if request.path.startswith(PORTAL_PATH):
            return SecureCookieSession()
        return self.make_null_session(app)

    def save_session(self, app, session, response):
        """Nothing: the row holds what the session holds (``sessions.start``)."""


def init_csrf(app):
    """CSRFProtect on ``app``, checked only where the portal asks (``protect``)."""
    app.config.update(WTF_CSRF_CHECK_DEFAULT=False, WTF_CSRF_SSL_STRICT=False,
                      WTF_CSRF_SECRET_KEY=signing_key(app.config),
                      WTF_CSRF_TIME_LIMIT=app.config["PORTAL_SESSION_HOURS"] * 3600)
    csrf.init_app(app)
    app.session_interface = PortalSessionInterface()


def protect():
    """Refuse a state-changing request that is cross-site or lacks a valid
    CSRF token (``CSRFError``)."""
    if request.method == "POST" and \
            request.headers.get("Sec-Fetch-Site", "").lower() in REFUSED_FETCH_SITES:
        raise CSRFError("The form was sent from another site.")
    csrf.protect()


def add_headers(response, frame_ancestors):
    """The headers of every portal answer (a page, the stylesheet, a redirect)."""
    response.headers["Content-Security-Policy"] = (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        f"base-uri 'none'; frame-ancestors {frame_ancestors}")
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    if request.endpoint != "portal.static":
        response.headers["Cache-Control"] = "no-store"
    return response
