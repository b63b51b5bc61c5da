"""Housekeeping: fail the deliveries a create stored for a subscription while
it was being disabled, after its waiting ones were failed, as disabling says."""
import logging

from ..webhooks.engine import retention

log = logging.getLogger(__name__)


def run(settings):
    """Fail one batch of them; how many."""
    failed = retention.fail_stray_deliveries()
    if failed:
        log.info("webhook subscriptions disabled: failed %d deliveries stored for them "
                 "while they were being disabled", failed)
    return failed
