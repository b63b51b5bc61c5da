"""The gunicorn master's start and end, used by ``config/gunicorn.conf.py``.

- ``check_configuration``: the master refuses to start, with one line, when
  a ``PLANTSTORE_*`` setting or one of gunicorn's own variables
  (``SERVER_VARIABLES``, in ``launch.py``) is unusable, or an address it is
  to listen on cannot be listened on (``binds.py``).
- ``remove_owned_metrics_dir``: the temporary metrics directory a server
  start made is removed when it stops, or refuses to start.
"""
import os
import shutil
import sys

from .. import encryption, settings
from ..db import configured_database, database
from ..observability import logs, tracing
from ..webhooks.subscriptions import stored_secrets
from .binds import check_listenable, requested
from .launch import SERVER_VARIABLES, USAGE_EXIT_STATUS, exit_if_unusable


def check_configuration(argv):
    """Exit with one line on stderr if a setting (``PLANTSTORE_*``, one of
    ``SERVER_VARIABLES``, or an ``OTEL_*`` one tracing needs) is unusable, or
    an address gunicorn started with ``argv`` is to listen on cannot be
    (before binding, before any fork): exit status 2 for one of
    ``SERVER_VARIABLES`` or an address (``plantstore web`` checks the
    variables too, before gunicorn starts), 1 for the rest. A refused start
    leaves no metrics directory of its own behind."""
    try:
        exit_if_unusable(os.environ, SERVER_VARIABLES)  # the server's options: exit status 2
        try:
            check_addresses(argv, os.environ)
        except settings.SettingError as error:
            print(f"Error: {error}", file=sys.stderr)
            sys.exit(USAGE_EXIT_STATUS)
        try:
            values = settings.read()
            configured = configured_database(values)
            tracing.check_configuration()
            check_stored_secrets(values, configured)
        except settings.SettingError as error:
            sys.exit(f"Error: {error}")
    except SystemExit:
        _remove_owned_metrics_dir()
        raise


_addresses_checked = False
"""Set once the addresses were found usable: a reload (SIGHUP) reads the
configuration again in the master already listening there."""


def check_addresses(argv, environ):
    """``SettingError`` naming the first address gunicorn (started with
    ``argv``) is to listen on where it cannot (``binds.check_listenable``).
    Inherited sockets (a USR2 upgrade, socket activation) are not looked at."""
    global _addresses_checked
    if _addresses_checked or "GUNICORN_FD" in environ or "LISTEN_FDS" in environ:
        return
    for bind in requested(argv, environ):
        check_listenable(bind)
    _addresses_checked = True


def check_stored_secrets(values, configured):
    """Refuse to start (``SettingError``) if a stored webhook secret is one no
    key of ``PLANTSTORE_ENCRYPTION_KEYS`` opens (see ``stored_secrets``); the
    master's connection is closed again before any fork. What it logs is
    JSON already (gunicorn applies ``logconfig`` only after this file)."""
    logs.configure_process_logging()
    encryption.use(values["ENCRYPTION_KEYS"])
    database.initialize(configured)
    try:
        stored_secrets.check_at_start()
    finally:
        database.close_all()


def remove_owned_metrics_dir(server):
    """Remove the temporary metrics directory this server start made (``on_exit``).

    A master started by a USR2 upgrade gets the original environment, so it
    makes (and later removes) its own directory: this one is nobody else's.
    """
    _remove_owned_metrics_dir()


def _remove_owned_metrics_dir():
    owned = os.environ.get("GUNICORN_OWNED_METRICS_DIR")
    if owned and owned == os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        shutil.rmtree(owned, ignore_errors=True)
