"""A subscription's signing secrets as stored: a new one minted, the ones
rotated out (``retired_secrets``: JSON of secret and overlap end, newest
first) read and written, and those that sign its messages revealed. The
subscriptions' rotation writes them (``subscriptions/secrets.py``), the
sender reads them (``sending/http_post.py``)."""
import base64
import datetime
import json
import secrets

from ...encryption import reveal

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32


def new_secret():
    """A fresh signing secret: ``whsec_`` and 32 random bytes in base64."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def retired(subscription, now):
    """The rotated-out secrets of ``subscription`` still signing at ``now``:
    (secret, expires_at) pairs, newest first."""
    entries = json.loads(subscription.retired_secrets or "[]")
    pairs = [(entry["secret"], datetime.datetime.fromisoformat(entry["expires_at"]))
             for entry in entries]
    return [(secret, expires) for secret, expires in pairs if expires > now]


def signing_secrets(subscription):
    """The secrets that sign its messages: the current one first, then every
    one rotated out that it keeps (no clock is read here: an overlap's end is
    judged by the housekeeping, on the database's clock), decrypted
    (``encryption.SecretUnreadable`` if no configured key opens one)."""
    entries = json.loads(subscription.retired_secrets or "[]")
    return tuple(reveal(stored) for stored in
                 (subscription.secret, *(entry["secret"] for entry in entries)))


def stored(pairs):
    """(secret, expires_at) pairs as ``retired_secrets`` keeps them (NULL: none);
    each secret as it is stored (encrypted or not, see ``plantstore.encryption``)."""
    if not pairs:
        return None
    return json.dumps([{"secret": secret, "expires_at": until.isoformat()}
                       for secret, until in pairs])
