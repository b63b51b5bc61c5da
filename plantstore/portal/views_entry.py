"""Entering by a link, and leaving: ``/portal/enter/<key>``, ``/portal/logout``."""
from flask import g, make_response, redirect, url_for

from ..db import database
from . import links, sessions
from .blueprint import bp, page

LINK_REFUSALS = {
    links.Refusal.UNKNOWN: (404, "This link is not valid",
                            "This portal link does not exist: it may be mistyped or "
                            "cut short. Ask whoever sent it for a new one."),
    links.Refusal.USED: (410, "This link was already used",
                         "Each portal link opens the portal once, and this one has been "
                         "opened. Ask for a new link."),
    links.Refusal.EXPIRED: (410, "This link has expired",
                            "Portal links last a short while, and this one's time is up. "
                            "Ask for a new link."),
    links.Refusal.REVOKED: (410, "This link was withdrawn",
                            "The access that made this link has been revoked. Ask for a "
                            "new link."),
}


@bp.route("/enter/<key>", methods=["GET"])
def enter(key):
    """Open a link: a new session, its cookie, and a redirect to a clean URL
    (the key stays in no history entry the user is left on)."""
    with database.atomic():
        opened = links.consume(key)
        if isinstance(opened, links.Refusal):
            status, title, message = LINK_REFUSALS[opened]
            return page("refused", status, title=title, message=message)
        cookie_key = sessions.start(opened)
        if g.portal is not None:  # a session offered before entry is never kept
            sessions.end(g.portal.id)
    response = redirect(url_for("portal.endpoints"), 303)
    sessions.set_cookie(response, cookie_key)
    return response


@bp.route("/logout", methods=["POST"])
def logout():
    """End the session on the server, and forget its cookie."""
    sessions.end(g.portal.id)
    g.portal = None
    response = make_response(page("signed_out", 200, logged_out=True))
    sessions.clear_cookie(response)
    return response


@bp.route("/", methods=["GET"])
def index():
    return redirect(url_for("portal.endpoints"), 303)
