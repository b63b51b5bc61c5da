"""What every plantstore process has, an app's or the worker's (which runs
without a Flask app): its keys, its token prefix masked in log lines, its
database, all from the settings (``settings.read``)."""
from . import encryption
from .db import bind_database
from .observability.logs import redact


def configure_process(config):
    """Set this process up from ``config``, every setting's value."""
    encryption.use(config["ENCRYPTION_KEYS"])
    redact.add_prefix(config["TOKEN_PREFIX"])
    bind_database(config)
