"""``plantstore worker``: deliver due webhook deliveries, forever or once.

It imports what delivering uses and nothing of the web's or of the other
commands', so it starts in what that takes (``make bench``, start-up).
"""
import signal

import click
from flask import current_app
from flask.cli import with_appcontext
from peewee import DatabaseError

from .. import db
from ..housekeeping.runner import Housekeeping
from ..observability import tracing
from ..webhooks.config import settings_of
from ..webhooks.sending.worker import Worker
from ..webhooks.subscriptions import stored_secrets


@click.command("worker")
@with_appcontext
@click.option("--once", is_flag=True,
              help="Deliver what is due now, then exit (for cron or tests).")
def worker_cli(once):
    """Deliver due webhook deliveries: forever, or just once.

    Stops on SIGTERM or SIGINT within one attempt's deadline (connect + read
    timeout): no new attempts start, those under way end and are recorded.
    Several workers may run at once against the same database.
    """
    _refuse_a_database_without_its_migrations(once)
    stored_secrets.check_at_start()  # refuses to start with secrets no key opens
    worker = Worker(settings_of(current_app), Housekeeping())
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
