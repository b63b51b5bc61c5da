"""The redirects routing makes (``/docs`` → ``/docs/``, ``/plants//5`` →
``/plants/5``), answered without trusting the request's ``Host``.

werkzeug writes them as absolute URLs built from the ``Host`` header, which
any client sets: ``Host: evil.example`` would get ``Location:
http://evil.example/docs/``. Here a redirect's ``Location`` is a path
(RFC 9110 §10.2.2 allows a relative reference): it keeps the client on the
host it asked, whatever that was, and keeps a trusted proxy's prefix
(``X-Forwarded-Prefix``, through ``ProxyFix``), which is in the script root.
Its body is the contract's ``{"error": 308, "message": ...}``. ``OPTIONS``
(a CORS preflight, which follows no redirect) is answered as the target
would answer it.
"""
from urllib.parse import unquote, urlsplit

from flask import request
from flask.globals import request_ctx
from werkzeug.exceptions import HTTPException
from werkzeug.routing import RequestRedirect


class PermanentRedirect(HTTPException):
    """308 to ``location``, a path on this host: an error handler turns it
    into the contract's shape, its ``Location`` header kept."""

    code = 308

    def __init__(self, location):
        super().__init__(f"This resource is served at {location}.")
        self.location = location

    def get_headers(self, environ=None, scope=None):
        return [*super().get_headers(environ, scope), ("Location", self.location)]


def relative_location(url):
    """The path and query of werkzeug's absolute ``url``, without its scheme
    and host; never a scheme-relative ``//host/...`` a browser would follow
    to another host."""
    parts = urlsplit(url)
    path = "/" + parts.path.lstrip("/\\")
    return f"{path}?{parts.query}" if parts.query else path


def raise_redirect(error):
    """Raise ``PermanentRedirect`` if ``error`` (this request's routing
    exception) is werkzeug's ``RequestRedirect``."""
    if isinstance(error, RequestRedirect):
        raise PermanentRedirect(relative_location(error.new_url)) from None


def options_of_target(app, error):
    """The automatic ``OPTIONS`` answer of the path ``error`` redirects to, if
    it is werkzeug's ``RequestRedirect`` (else None)."""
    if not isinstance(error, RequestRedirect):
        return None
    path = unquote(urlsplit(relative_location(error.new_url)).path)
    response = app.response_class()
    response.allow.update(request_ctx.url_adapter.allowed_methods(
        path[len(request.script_root):]))
    del response.headers["Content-Type"]  # an empty body has no media type
    return response
