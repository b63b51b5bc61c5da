"""Housekeeping: delete the finished deliveries older than the retention
(``PLANTSTORE_WEBHOOK_RETENTION_DAYS``), with their attempts."""
import logging

from ..webhooks.engine import retention

log = logging.getLogger(__name__)


def run(settings):
    """One retention batch: finished deliveries older than the retention."""
    deleted = retention.purge_batch(settings.retention_days)
    if deleted:
        log.info("webhook retention: deleted %d deliveries older than %d days",
                 deleted, settings.retention_days)
    return deleted
