"""``plantstore worker``: deliver due webhook deliveries, forever or once.

It imports what delivering uses and nothing of the web's, Flask's or the
other commands', so it starts in what that takes (``make bench``, start-up).
"""
import contextlib
import signal

import click
from peewee import DatabaseError

from .. import db, settings
from ..housekeeping.runner import Housekeeping
from ..observability import tracing
from ..process import configure_process
from ..webhooks.config import from_config, settings_of
from ..webhooks.sending.worker import Worker
from ..webhooks.subscriptions import stored_secrets


@click.command("worker")
@click.option("--once", is_flag=True,
              help="Deliver what is due now, then exit (for cron or tests).")
@click.pass_obj
def worker_cli(script_info, once):
    """Deliver due webhook deliveries: forever, or just once.

    Stops on SIGTERM or SIGINT within one attempt's deadline (connect + read
    timeout): no new attempts start, those under way end and are recorded.
    Several workers may run at once against the same database.
    """
    with _webhook_settings(script_info) as webhook_settings:
        _refuse_a_database_without_its_migrations(once)
        stored_secrets.check_at_start()  # refuses to start with secrets no key opens
        _deliver(Worker(webhook_settings, Housekeeping()), once)


@contextlib.contextmanager
def _webhook_settings(script_info):
    """The settings the worker delivers with. ``plantstore worker`` runs
    without a Flask app: the settings are read from the environment and
    the process configured with them (``process.configure_process``).
    Handed an app (``app.test_cli_runner()``: ``script_info``), it runs in
    that app's context, with its settings."""
    if script_info is None:
        config = settings.read()
        configure_process(config)
        yield from_config(config)
        return
    app = script_info.load_app()
    with app.app_context():
        yield settings_of(app)


def _deliver(worker, once):
    """Run ``worker`` once or until SIGTERM/SIGINT, tracing when OTEL_* say so."""
    tracing.start()  # when the OTEL_* variables turn it on
    try:
        if once:
            tally = worker.run_once()
            click.echo(", ".join(f"{kind} {count}" for kind, count in sorted(tally.items()))
                       or "nothing due")
            return
        previous = {sig: signal.signal(sig, lambda *_: worker.stop())
                    for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            worker.run_forever()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    finally:
        tracing.shutdown()  # the last spans, within tracing.FLUSH_SECONDS


def _refuse_a_database_without_its_migrations(once):
    """One line, exit 1, when the database lacks migrations this release
    needs. A database that does not answer is for ``--once`` one line too;
    a worker that runs on waits for it, as through any outage."""
    try:
        missing = db.missing_migrations()
    except DatabaseError:
        if once:
            raise
        return
    if missing:
        raise click.ClickException(
            f"the database lacks {len(missing)} migration{'s' if len(missing) > 1 else ''} "
            f"this release needs ({missing[0]} first): run `plantstore db upgrade`")
