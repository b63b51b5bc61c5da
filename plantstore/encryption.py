"""Receivers' secrets encrypted at rest: signing secrets (current and
rotated out) and bearer tokens, under ``PLANTSTORE_ENCRYPTION_KEYS``.

The keys are Fernet keys (``cryptography``: AES-128-CBC with HMAC-SHA256,
authenticated); the first encrypts, every one decrypts (``MultiFernet``), so
an operator rotates by putting a new key first and rewriting what is stored
(``plantstore keys reencrypt``, see ``webhooks/subscriptions/stored_secrets.py``).
A stored value says
whether it is encrypted: ``fernet:`` then the token. No plain secret can
begin so (``whsec_`` secrets and RFC 6750 bearer tokens hold no ``:``), so
plain and encrypted rows coexist while a database is being encrypted.

Values are sealed where they are stored (registration, rotation, a PATCH,
the CLI) and opened where they are used (signing, the ``Authorization``
header). The process's keys are set by the app factory (``init_app``);
every thread uses them. Without keys, values are stored in plain text, as
before this release.
"""
import functools
import logging
import re

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

log = logging.getLogger(__name__)

PREFIX = "fernet:"
"""What begins every encrypted value (never a plain secret)."""

SETTING = "PLANTSTORE_ENCRYPTION_KEYS"


class SecretUnreadable(Exception):
    """A stored value that no configured key opens (or encrypted, and no keys)."""


FERNET_KEY = re.compile(r"[A-Za-z0-9_-]{43}=")
"""A Fernet key exactly as ``plantstore keys generate`` writes it: 32 bytes in
url-safe base64. ``Fernet()`` alone would take ``K1;K2`` or ``K1garbage!!``
as K1 (base64 decoding stops at the padding and skips what it does not know)."""


def parse_keys(raw):
    """The keys of ``PLANTSTORE_ENCRYPTION_KEYS``: comma-separated Fernet keys
    (empty: none). A malformed one is named by its position, never shown."""
    if isinstance(raw, (list, tuple)):
        items = [str(item).strip() for item in raw]
    elif isinstance(raw, str):
        items = [part.strip() for part in raw.split(",")] if raw.strip() else []
    else:
        raise ValueError("must be comma-separated keys from `plantstore keys generate`")
    for position, key in enumerate(items, start=1):
        if not FERNET_KEY.fullmatch(key):
            separated = "; separate keys with commas" if re.search(r"[\s;:|]", key) else ""
            raise ValueError(f"must be comma-separated keys from `plantstore keys "
                             f"generate`: key {position} of {len(items)} is not a Fernet "
                             f"key (44 characters of url-safe base64 ending in =){separated}")
    if len(set(items)) < len(items):
        raise ValueError("must not list a key twice")
    return tuple(items)


parse_keys.allowed = "empty (secrets stored in plain text), or comma-separated Fernet keys"


def generate_key():
    """A new random key, as ``PLANTSTORE_ENCRYPTION_KEYS`` takes it."""
    return Fernet.generate_key().decode()


class Keyring:
    """The keys of a process: the first seals, all open."""

    def __init__(self, keys=()):
        self.keys = tuple(keys)
        self._all = MultiFernet([Fernet(key) for key in self.keys]) if self.keys else None
        self._first = Fernet(self.keys[0]) if self.keys else None

    @property
    def encrypts(self):
        """Whether values are stored encrypted."""
        return self._all is not None

    def seal(self, plain):
        """``plain`` as it is stored: encrypted under the first key (None stays None)."""
        if plain is None or not self.encrypts:
            return plain
        return PREFIX + self._all.encrypt(plain.encode()).decode()

    def open(self, stored):
        """The plain value of a stored one (``SecretUnreadable`` if no key opens it)."""
        if not is_sealed(stored):
            return stored
        return _opened(self, stored)

    def is_current(self, stored):
        """Whether ``stored`` is as ``seal`` would store it now: encrypted under
        the first key (or, without keys, plain)."""
        if stored is None:
            return True
        if not self.encrypts:
            return not is_sealed(stored)
        if not is_sealed(stored):
            return False
        try:
            self._first.decrypt(stored[len(PREFIX):].encode())
        except InvalidToken:
            return False
        return True

    def reseal(self, stored):
        """``stored`` sealed under the first key (``SecretUnreadable`` if no key opens it)."""
        return None if stored is None else self.seal(self.open(stored))


@functools.lru_cache(maxsize=4096)
def _opened(keyring, stored):
    """Decrypt once per value and keyring: every attempt signs with it."""
    if keyring._all is None:
        raise SecretUnreadable(f"a stored secret is encrypted and {SETTING} is empty")
    try:
        return keyring._all.decrypt(stored[len(PREFIX):].encode()).decode()
    except InvalidToken:
        raise SecretUnreadable(f"no key in {SETTING} opens a stored secret") from None


def is_sealed(stored):
    """Whether a stored value is encrypted."""
    return stored is not None and stored.startswith(PREFIX)


_keyring = Keyring()


def keyring():
    """This process's keys."""
    return _keyring


def use(keys):
    """Make ``keys`` this process's keys."""
    global _keyring
    if keys != _keyring.keys:
        _keyring = Keyring(keys)
    return _keyring


def seal(plain):
    """``plain`` as it is stored under this process's keys."""
    return _keyring.seal(plain)


def reveal(stored):
    """The plain value of a stored one, under this process's keys."""
    return _keyring.open(stored)
