"""The WSGI app, put together: ``build`` (``plantstore.create_app``).

Imported as a whole by gunicorn's master (config/gunicorn.conf.py), so that
every worker inherits these modules instead of importing them after its
fork; the ``plantstore`` command never imports it (``create_command_app``).
"""
from werkzeug.middleware.proxy_fix import ProxyFix

from . import configure
from .cli import register_commands
from .plants.routes import blp as plants_blp
from .plants.schemas import NewPlantSchema
from .portal import init_app as init_portal
from .portal.api import blp as portal_links_blp
from .web.api import Api, App
from .web.body.framing import Request
from .web.errors import register_error_handlers
from .web.health import blp as health_blp
from .web.metrics_endpoint import add_scrape_collector, init_metrics
from .web.openapi import complete_spec, register_converters, spec_config, spec_kwargs
from .web.ratelimit import init_rate_limits
from .web.request_ids import init_request_ids
from .webhooks.engine import backlog as webhook_backlog
from .webhooks.engine import gauges as webhook_gauges
from .webhooks.subscriptions.routes import blp as webhooks_blp


def build(config=None):
    """Settings → database → errors → API → docs → portal → CLI."""
    app = App(__name__)
    # The body cap holds for chunked bodies too (413, not a truncated body).
    app.request_class = Request
    configure(app, config)
    app.config.update(spec_config())
    init_request_ids(app)
    init_metrics(app)
    for collector in webhook_gauges.collectors():
        add_scrape_collector(app, collector)
    webhook_backlog.watch(app.config["WEBHOOK_BACKLOG_WARN_SECONDS"])
    register_error_handlers(app)

    api = Api(app, spec_kwargs=spec_kwargs(app))
    register_converters(app, api)
    api.register_blueprint(plants_blp)
    api.register_blueprint(webhooks_blp)
    api.register_blueprint(portal_links_blp)
    complete_spec(app, api, NewPlantSchema)

    app.register_blueprint(health_blp)
    init_portal(app)

    init_rate_limits(app)
    register_commands(app)

    proxies = app.config["TRUSTED_PROXIES"]
    if proxies:
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=proxies, x_proto=proxies,
                                x_host=proxies, x_port=proxies, x_prefix=proxies)
    return app
