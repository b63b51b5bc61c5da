"""Standard Webhooks signatures: the three ``webhook-*`` headers.

The HMAC itself is the ``standardwebhooks`` library's, so receivers verify
with the same code: ``standardwebhooks.Webhook(secret).verify(body, headers)``.
"""
from standardwebhooks import Webhook


def signature_headers(message_id, timestamp, payload, signing_secrets):
    """The ``webhook-id``, ``-timestamp`` and ``-signature`` headers of one attempt.

    ``timestamp`` is an aware UTC datetime; ``payload`` the exact text sent.
    With several secrets (a rotation in progress) the signature header holds
    one ``v1,<base64>`` per secret, space-separated, as the specification
    allows, so receivers holding either secret accept the message.
    """
    signatures = [Webhook(secret).sign(message_id, timestamp, payload)
                  for secret in signing_secrets]
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(timestamp.timestamp())),
        "webhook-signature": " ".join(signatures),
    }
