"""The portal's blueprint: the gate every request passes, the pages that
say no, and the helpers the views share.

The gate: the portal is off (every page a 404) without
``PLANTSTORE_PORTAL_URL``; a page needs a valid session (``sessions``); a
POST needs a CSRF token and a same-origin fetch (``security.protect``) and,
but for logging out, a session that is not read-only. The entry's POST,
made before any session, checks its own (``views_entry``).
"""
from flask import Blueprint, current_app, g, render_template, request, session
from flask_wtf.csrf import CSRFError

from ..web.auth import WEBHOOKS_READ, WEBHOOKS_WRITE, Caller
from ..web.errors import handle_http_exception
from ..webhooks.subscriptions import operations
from . import security, sessions

bp = Blueprint("portal", __name__, url_prefix="/portal", template_folder="templates",
               static_folder="static", static_url_path="/static")

OPEN_ENDPOINTS = ("portal.open_link", "portal.entry", "portal.enter", "portal.static",
                  "portal.anything_else")
"""What answers without a session (an unknown address is a 404 page to anyone)."""
READ_ONLY_ALLOWED = ("portal.logout",)
"""The one POST a read-only session may send."""


def page(template, status=200, **context):
    """A rendered page (``templates/portal/<template>.html``) with ``status``."""
    return render_template(f"portal/{template}.html", session_info=g.get("portal"),
                           **context), status


def refusal_page(message, status=403, title="Refused"):
    """A page saying in plain words why nothing was done."""
    return page("refused", status, title=title, message=message)


def caller():
    """The session's user as the operations see a caller."""
    portal = g.portal
    scopes = {WEBHOOKS_READ} if portal.read_only else {WEBHOOKS_READ, WEBHOOKS_WRITE}
    return Caller(portal.user_id, portal.is_admin, frozenset(scopes))


@bp.before_request
def gate():
    if not current_app.config["PORTAL_URL"]:
        return page("not_found", 404, message="The portal is not enabled on this server.")
    if request.endpoint == "portal.static":
        return None
    g.portal = sessions.current(sessions.presented_key())
    if g.portal is not None:
        session["csrf_token"] = g.portal.csrf_token
    if request.endpoint in OPEN_ENDPOINTS:
        return None
    if g.portal is None:
        return page("signed_out", 403)
    if request.method == "POST":
        security.protect()
        if g.portal.read_only and request.endpoint not in READ_ONLY_ALLOWED:
            return refusal_page("This portal session is read-only: it shows everything "
                                "and changes nothing. Ask for a link that may make changes.")
    return None


ERROR_PAGES = {
    429: ("Too many requests", "Too many requests from your address: wait a minute, "
                               "then try again."),
    500: ("Something went wrong", "The page could not be made: the fault is ours and "
                                  "has been logged. Try again in a moment."),
    503: ("Unavailable for a moment", "The portal cannot reach its database just now: "
                                      "nothing was changed. Wait a few seconds, then "
                                      "try again."),
}
"""The pages that stand for the API's JSON errors the app's handlers answer
(a spent rate limit, a bug, the database away) on a portal request."""


@bp.after_request
def headers(response):
    if response.status_code >= 400 and response.mimetype == "application/json":
        title, message = ERROR_PAGES.get(response.status_code, ("Refused", (
            response.get_json(silent=True) or {}).get("message", "")))
        rendered, _ = refusal_page(message, response.status_code, title)
        response.set_data(rendered)  # its headers (Retry-After, Allow) stay
        response.mimetype = "text/html"
    return security.add_headers(response, current_app.config["PORTAL_FRAME_ANCESTORS"])


@bp.app_errorhandler(404)
@bp.app_errorhandler(405)
def unrouted(error):
    """An address under ``/portal/`` no page's route takes (a wrong method, an
    id out of range): a page, as the portal's own 404s are; elsewhere the
    API's JSON."""
    if not request.path.startswith(security.PORTAL_PATH):
        return handle_http_exception(error)
    if error.code == 405:
        response = current_app.make_response(refusal_page(
            f"A {request.method} request does nothing at this address.", 405, "Not allowed"))
        response.headers["Allow"] = ", ".join(sorted(error.valid_methods or ()))
    else:
        response = current_app.make_response(not_found())
    return security.add_headers(response, current_app.config["PORTAL_FRAME_ANCESTORS"])


@bp.errorhandler(CSRFError)
def csrf_refused(error):
    return refusal_page("This form was not accepted: it came from another site, or it "
                        "is older than your session. Go back, reload the page and send "
                        "it again.")


@bp.errorhandler(operations.NotFound)
@bp.errorhandler(404)
def not_found(error=None):
    return page("not_found", 404, message="There is nothing here, or it is not yours.")


@bp.errorhandler(operations.Refused)
def refused(error):
    if isinstance(error, operations.Disabled):
        return refusal_page(error.worded("its Enable button on the Endpoints page"),
                            error.status)
    return refusal_page(error.message, error.status)


@bp.route("/<path:rest>", methods=["GET", "POST"])
def anything_else(rest):
    """Any other address under the portal: a 404 page."""
    return not_found()
