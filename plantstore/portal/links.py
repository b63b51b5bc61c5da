"""Portal links: minted for a user (by their token through the API, or by an
operator's ``plantstore portal link``), opened once.

A link's key is ``KEY_PREFIX`` and 256 random bits; only its SHA-256 digest
is stored (as tokens are, ``web.auth.digest``), and the prefix lets the log
redaction mask a key wherever it appears (``observability.logs``). Expiry
and use are the database's time (``db.clock``): a link is consumed by one
``UPDATE ... WHERE used_at IS NULL AND expires_at > now``, so of two opens
at once exactly one wins.
"""
import enum
import secrets

from ..db import clock, database
from ..db.models import PortalLink, Token
from ..web.auth import digest

KEY_PREFIX = "plk_"
DEFAULT_TTL_SECONDS = 900
MIN_TTL_SECONDS, MAX_TTL_SECONDS = 60, 86400
ENTER_PATH = "/portal/enter/"


class Refusal(enum.Enum):
    """Why a link opens nothing (each a page of its own, see the views)."""
    UNKNOWN = "unknown"    # never minted, mistyped or tampered with
    USED = "used"
    EXPIRED = "expired"
    REVOKED = "revoked"    # the token that minted it is revoked or expired


def mint(public_url, user_id, read_only=False, ttl_seconds=DEFAULT_TTL_SECONDS,
         token_id=None):
    """A new link for ``user_id``: (its URL under ``public_url``, its expiry
    as the database stored it)."""
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    with database.atomic():
        link = PortalLink.create(digest=digest(key), user=user_id, read_only=read_only,
                                 token=token_id, created_at=clock.now(),
                                 expires_at=clock.after(ttl_seconds))
        expires_at = (PortalLink.select(PortalLink.expires_at)
                      .where(PortalLink.id == link.id).scalar())
    return public_url.rstrip("/") + ENTER_PATH + key, expires_at


def consume(key):
    """The link ``key`` opens, now used; or the ``Refusal`` saying why not.
    Call inside the transaction that starts its session."""
    key_digest = digest(key)
    used = (PortalLink.update(used_at=clock.now())
            .where(PortalLink.digest == key_digest, PortalLink.used_at.is_null(),
                   PortalLink.expires_at > clock.now()).execute())
    link = PortalLink.get_or_none(PortalLink.digest == key_digest)
    if not used:
        if link is None:
            return Refusal.UNKNOWN
        return Refusal.USED if link.used_at is not None else Refusal.EXPIRED
    if link.token_id is not None and not _token_valid(link.token_id):
        return Refusal.REVOKED
    return link


def _token_valid(token_id):
    """Whether the token is neither revoked nor expired, by the database's clock."""
    return Token.select().where(
        Token.id == token_id, Token.revoked_at.is_null(),
        Token.expires_at.is_null() | (Token.expires_at > clock.now())).exists()

