"""Entering by a link, and leaving: ``/portal/enter/<key>`` (checks the link
and hands its key to the browser), ``/portal/enter`` (asks, then spends
it), ``/portal/logout``."""
from flask import g, make_response, redirect, session, url_for

from ..db import database
from . import links, security, sessions
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


NO_HELD_LINK = (400, "Open your link again",
                "This page opens the portal with the link you were sent, and this browser "
                "holds none: open the link itself again, in this browser, or ask for a "
                "new one.")


@bp.route("/enter/<key>", methods=["GET"])
def open_link(key):
    """A link fetched, by its owner or by a mail scanner: nothing is spent.
    The key goes to a cookie and the browser to the entry page's clean URL
    (the key stays in no history entry the user is left on)."""
    checked = links.check(key)
    if isinstance(checked, links.Refusal):
        return _refused(LINK_REFUSALS[checked])
    response = redirect(url_for("portal.entry"), 303)
    links.hold_key(response, key)
    return response


@bp.route("/enter", methods=["GET"])
def entry():
    """The page that asks the link's owner to open the portal."""
    key = links.held_key()
    if key is None:
        return _refused(NO_HELD_LINK)
    checked = links.check(key)
    if isinstance(checked, links.Refusal):
        return _refused(LINK_REFUSALS[checked])
    session["csrf_token"] = links.entry_csrf_token(key)
    return page("enter", user_name=checked.user.name, read_only=checked.read_only)


@bp.route("/enter", methods=["POST"])
def enter():
    """Spend the held link: a new session, its cookie, and a redirect to the
    endpoints page."""
    key = links.held_key()
    if key is None:
        return _refused(NO_HELD_LINK)
    session["csrf_token"] = links.entry_csrf_token(key)
    security.protect()
    with database.atomic():
        opened = links.consume(key)
        if isinstance(opened, links.Refusal):
            return _refused(LINK_REFUSALS[opened])
        cookie_key = sessions.start(opened)
        if g.portal is not None:  # a session offered before entry is never kept
            sessions.end(g.portal.id)
    response = redirect(url_for("portal.endpoints"), 303)
    links.forget_key(response)
    sessions.set_cookie(response, cookie_key)
    return response


def _refused(refusal):
    """A refusal page (status, title, message) that drops any key the browser holds."""
    status, title, message = refusal
    response = make_response(page("refused", status, title=title, message=message))
    links.forget_key(response)
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
