"""plantstore: a plant store HTTP service with bearer tokens and webhooks.

Importing any ``plantstore`` module runs this file first, so it imports
nothing at its top: each factory imports the parts it puts together when
called, and a command (``plantstore.cli``) starts without the web's modules.
"""
__version__ = "1.0.0"


def configure(app, config):
    """What every app has: settings → the process's parts → tracing →
    connections per request → webhooks."""
    from . import settings
    from .db import init_database
    from .observability.tracing import init_app as init_tracing
    from .process import configure_process
    from .webhooks.config import init_app as init_webhooks
    settings.load(app, config)
    configure_process(app.config)
    # First of the request hooks, so that a request's span covers the others.
    init_tracing(app)
    init_database(app)
    init_webhooks(app)


def create_command_app(config=None):
    """The app a ``plantstore`` command runs in: the parts of ``configure``,
    none of the web's (API, routes, docs, rate limits, metrics endpoint)."""
    import flask
    app = flask.Flask(__name__)
    configure(app, config)
    return app


def create_app(config=None):
    """The WSGI app (``app.py``): the parts of ``configure``, then the web's."""
    from .app import build
    return build(config)
