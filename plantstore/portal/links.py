"""Portal links: minted for a user (by their token through the API, or by an
operator's ``plantstore portal link``), opened once.

Fetching a link spends nothing: mail scanners and link previews fetch
every link in a message, and would otherwise spend it before its owner
clicks. A GET checks the link, hands its key to the browser in a cookie
(``LINK_COOKIE``: ``HttpOnly``, ``SameSite=Lax``, only for
``ENTRY_PATH``) and redirects to that clean address, whose page asks the
owner to open the portal; that form's POST (CSRF-checked, its token
derived from the key, ``entry_csrf_token``) spends the link.

A link's key is ``KEY_PREFIX`` and 256 random bits; only its SHA-256 digest
is stored (as tokens are, ``web.auth.digest``), and the prefix lets the log
redaction mask a key wherever it appears (``observability.logs``). Expiry
and use are the database's time (``db.clock``): a link is consumed by one
``UPDATE ... WHERE used_at IS NULL AND expires_at > now``, so of two opens
at once exactly one wins.
"""
import enum
import hashlib
import secrets

from flask import request

from ..db import clock, database
from ..db.models import PortalLink, Token
from ..web.auth import digest

KEY_PREFIX = "plk_"
DEFAULT_TTL_SECONDS = 900
MIN_TTL_SECONDS, MAX_TTL_SECONDS = 60, 86400
ENTER_PATH = "/portal/enter/"
ENTRY_PATH = "/portal/enter"
LINK_COOKIE = "plantstore_portal_link"


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


def check(key):
    """The link ``key`` would open, left unspent; or the ``Refusal`` saying why not."""
    link = (PortalLink
            .select(PortalLink, (PortalLink.expires_at > clock.now()).alias("unexpired"))
            .where(PortalLink.digest == digest(key)).first())
    if link is None:
        return Refusal.UNKNOWN
    if link.used_at is not None:
        return Refusal.USED
    if not link.unexpired:
        return Refusal.EXPIRED
    if link.token_id is not None and not _token_valid(link.token_id):
        return Refusal.REVOKED
    return link


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


def hold_key(response, key):
    """Hand the browser ``key`` for the entry page (until it closes)."""
    response.set_cookie(LINK_COOKIE, key, path=ENTRY_PATH, httponly=True, samesite="Lax",
                        secure=request.is_secure)


def held_key():
    """The key the browser holds for the entry page, or None; None too when it
    sent several (another site may have set one, see ``sessions.presented_key``)."""
    keys = request.cookies.getlist(LINK_COOKIE)
    return keys[0] if len(keys) == 1 and keys[0].startswith(KEY_PREFIX) else None


def forget_key(response):
    """Tell the browser to drop the key (the link is spent, or refused)."""
    response.delete_cookie(LINK_COOKIE, path=ENTRY_PATH, httponly=True, samesite="Lax",
                           secure=request.is_secure)


def entry_csrf_token(key):
    """The raw CSRF token of the entry page's form: bound to the link, so a
    form for one link never spends another, and known to nobody without it."""
    return hashlib.sha256(b"plantstore portal entry " + key.encode()).hexdigest()
