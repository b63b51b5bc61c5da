"""Portal sessions: server-side rows, a cookie holding only their key.

Opening a link starts a new session (a key of 256 random bits; the row
keeps its SHA-256 digest), whatever cookie the browser offered: no session
id chosen before entry is ever kept. A session is valid while it has not
ended (logout, ``end_for_user``), has been used within the idle timeout,
is younger than its absolute lifetime, and the token whose link started it
is neither revoked nor expired: all judged by the database's clock in the
statement that finds it.

The cookie (``COOKIE_NAME``) is ``HttpOnly``, ``SameSite=Lax``, scoped to
``/portal``, and ``Secure`` whenever the request is HTTPS as the app sees
it (behind ``PLANTSTORE_TRUSTED_PROXIES`` proxies, their word).
"""
import dataclasses
import hashlib
import os
import secrets

from flask import current_app, request
from peewee import JOIN

from ..db import clock, database
from ..db.models import PortalSession, Token, User
from ..web.auth import digest

LAST_SEEN_GRAIN_SECONDS = 60
"""A session's last use is written when it is older than this: a page read
within the minute writes nothing (the idle timeout is kept to the minute)."""

COOKIE_NAME = "plantstore_portal"
COOKIE_PATH = "/portal"
KEY_PREFIX = "pps_"


@dataclasses.dataclass(frozen=True)
class Session:
    """A valid session, as the pages need it."""
    id: int
    user_id: int
    user_name: str
    is_admin: bool
    read_only: bool
    csrf_token: str


def start(link):
    """A new session for the user of ``link`` (just consumed); its cookie's key."""
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    now = clock.now()
    PortalSession.create(digest=digest(key), user=link.user_id, read_only=link.read_only,
                         token=link.token_id, created_at=now, last_seen_at=now,
                         csrf_token=hashlib.sha1(os.urandom(64)).hexdigest())
    return key


def current(key):
    """The valid session whose cookie holds ``key`` (its last use now, to
    ``LAST_SEEN_GRAIN_SECONDS``), or None."""
    if not key or not key.startswith(KEY_PREFIX):
        return None
    config = current_app.config
    token_valid = Token.id.is_null() | (Token.revoked_at.is_null() & (
        Token.expires_at.is_null() | (Token.expires_at > clock.now())))
    row = (PortalSession
           .select(PortalSession, User.id, User.name, User.is_admin,
                   (PortalSession.last_seen_at <= clock.before(LAST_SEEN_GRAIN_SECONDS))
                   .alias("last_seen_stale"))
           .join(User).switch(PortalSession)
           .join(Token, on=(Token.id == PortalSession.token), join_type=JOIN.LEFT_OUTER)
           .where(PortalSession.digest == digest(key), PortalSession.ended_at.is_null(),
                  PortalSession.last_seen_at > clock.before(config["PORTAL_IDLE_MINUTES"] * 60),
                  PortalSession.created_at > clock.before(
                      config["PORTAL_SESSION_HOURS"] * 3600),
                  token_valid)
           .first())
    if row is None:
        return None
    if row.last_seen_stale:
        (PortalSession.update(last_seen_at=clock.now())
         .where(PortalSession.id == row.id).execute())
    return Session(row.id, row.user.id, row.user.name, row.user.is_admin, row.read_only,
                   row.csrf_token)


def end(session_id):
    """End one session (logout)."""
    with database.atomic():
        (PortalSession.update(ended_at=clock.now())
         .where(PortalSession.id == session_id, PortalSession.ended_at.is_null()).execute())


def end_for_user(user_id):
    """End every session of a user; how many were open."""
    with database.atomic():
        return (PortalSession.update(ended_at=clock.now())
                .where(PortalSession.user == user_id, PortalSession.ended_at.is_null())
                .execute())


def set_cookie(response, key):
    """Give the browser the session's cookie."""
    response.set_cookie(COOKIE_NAME, key, path=COOKIE_PATH, httponly=True, samesite="Lax",
                        secure=request.is_secure,
                        max_age=current_app.config["PORTAL_SESSION_HOURS"] * 3600)


def clear_cookie(response):
    """Tell the browser to forget the cookie."""
    response.delete_cookie(COOKIE_NAME, path=COOKIE_PATH, httponly=True, samesite="Lax",
                           secure=request.is_secure)


def presented_key():
    """The key of the request's cookie, or None; None too when the browser
    sent several: one was set by someone else (a sibling subdomain may set a
    cookie of this name with a longer path, which browsers send first), and
    which is the user's own cannot be told."""
    keys = request.cookies.getlist(COOKIE_NAME)
    return keys[0] if len(keys) == 1 else None
