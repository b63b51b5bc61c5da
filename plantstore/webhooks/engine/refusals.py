"""The one wording of an action refused while its subscription is disabled
(a test event, a re-send, a recovery): the API, the CLI and the queue say it
alike."""
from ...observability.logs import one_line


def disabled_refusal(subscription, enable_with):
    """Why an action waits for ``subscription`` (disabled) to be enabled, and
    how to enable it (``enable_with``: the command or the request that does)."""
    reason = one_line(subscription.disabled_reason or "no reason recorded")
    return (f"webhook subscription {subscription.id} is disabled ({reason}); "
            f"enable it first with {enable_with}")


def enable_command(subscription_id):
    """The operator's command that enables ``subscription_id``."""
    return f"`plantstore webhooks enable {subscription_id}`"
