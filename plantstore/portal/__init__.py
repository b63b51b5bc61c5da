"""The portal: server-rendered pages where a user manages their webhook
endpoints and reads their deliveries, entered by a single-use link.

``links`` mints and consumes links, ``sessions`` keeps the server-side
sessions and their cookie, ``security`` the CSRF tokens, the cross-site
refusal and the headers, ``blueprint`` the gate and the pages that say no,
``views_*`` the pages, ``api`` the ``POST /webhooks/portal-links`` route.
See docs/portal.md.
"""
from ..observability.logs import redact
from . import links, security, sessions, views_deliveries, views_endpoints, views_entry  # noqa: F401
from .blueprint import bp


def init_app(app):
    """Serve the portal's pages (each a 404 while it is off), with CSRF."""
    security.init_csrf(app)
    redact.add_prefix(links.KEY_PREFIX)
    redact.add_prefix(sessions.KEY_PREFIX)
    app.register_blueprint(bp)
