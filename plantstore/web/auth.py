"""Bearer tokens (RFC 6750): issue, hash, verify, revoke, and the 401/403 answers.

A token is ``<prefix><43 url-safe characters>`` (256 bits of entropy). Only
its SHA-256 digest is stored; a request's token is hashed and found by
digest. Expiry and revocation times are the database's (``clock``): set by
it, and compared with its now in the statement that finds the token, so
hosts whose clocks disagree agree on which tokens are valid.

A route may leave the token to its write (``require_scope``'s
``checked_by_write``): where the store can (PostgreSQL), the create's own
statement finds the token and writes nothing unless it is valid with the
scope, which saves every create a round trip to the database.
"""
import functools
import hashlib
import os
import secrets
from dataclasses import dataclass

from flask import g, request
from werkzeug.exceptions import HTTPException

from ..db import clock
from ..db.models import Token
from ..db.named_sql import Queries
from ..webhooks.engine.store import TokenRefused
from .errors import error_response

READ, WRITE = "plants:read", "plants:write"
WEBHOOKS_READ, WEBHOOKS_WRITE = "webhooks:read", "webhooks:write"
ALL_SCOPES = (READ, WRITE, WEBHOOKS_READ, WEBHOOKS_WRITE)
REALM = 'Bearer realm="plantstore"'


@dataclass(frozen=True)
class Caller:
    """Who is calling, as far as authorization cares (``token_id``: the
    token presented, when the caller came with one)."""
    user_id: int
    is_admin: bool
    scopes: frozenset
    token_id: int | None = None


@dataclass(frozen=True)
class PresentedToken:
    """A bearer token not looked up yet, for a write that checks it in its
    own statement: it needs to be valid now and to carry ``scope``."""
    digest: str
    scope: str


def digest(secret):
    """The stored form of a token: hex SHA-256 of its text."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def issue_token(user, scopes=ALL_SCOPES, expires_in_days=None, prefix="pst_"):
    """Create a token for ``user``; returns (row, secret). The secret is shown once."""
    unknown = set(scopes) - set(ALL_SCOPES)
    if unknown:
        raise ValueError(f"unknown scope(s): {', '.join(sorted(unknown))}")
    secret = prefix + secrets.token_urlsafe(32)
    expires_at = None
    if expires_in_days is not None:
        expires_at = clock.after(expires_in_days * 86400)
    row = Token.create(user=user, digest=digest(secret), hint=secret[:len(prefix) + 4],
                       scopes=" ".join(sorted(scopes)), expires_at=expires_at)
    if expires_at is not None:  # computed by the database: read what it stored
        row.expires_at = Token.select(Token.expires_at).where(Token.id == row.id).scalar()
    return row, secret


def revoke_token(token_id):
    """Revoke a token by id; returns False when no live token has that id."""
    return bool(Token.update(revoked_at=clock.now())
                .where(Token.id == token_id, Token.revoked_at.is_null())
                .execute())


QUERIES = Queries(os.path.join(os.path.dirname(__file__), "auth.sql"))
"""Every authenticated request runs ``valid_token`` (see ``db.named_sql``)."""


def find_caller(secret):
    """The Caller a presented token stands for, or None if it is not valid now."""
    rows = QUERIES.rows("valid_token", {"digest": digest(secret)})
    if not rows:
        return None
    row = rows[0]
    return _caller(row["scopes"], row["user_id"], row["is_admin"], row["token_id"])


@functools.lru_cache(maxsize=1024)
def _caller(scopes, user_id, is_admin, token_id):
    """The (frozen) Caller of a token row, made once per row's values."""
    # Kept with the token read once per request (authenticated_caller's
    # secret): without both, in process, a list of 10 ran 1.02x the
    # instructions, a create 1.01-1.04x (valgrind, 2026-11-28).
    return Caller(user_id, bool(is_admin), frozenset(scopes.split()), token_id)


def _presented_token():
    """The token of the Authorization header: None if absent, "" if malformed."""
    header = request.headers.get("Authorization")
    if header is None:
        return None
    scheme, _, credentials = header.partition(" ")
    # RFC 6750 b64token: one run of token68 characters, nothing around it.
    if scheme.lower() != "bearer" or not credentials or " " in credentials:
        return ""
    return credentials


def authenticated_caller(secret=None):
    """The Caller of the request's bearer token (None if absent or not valid now),
    looked up once per request however many times it is asked for (``secret``:
    the token ``_presented_token`` gave, if already read)."""
    caller = g.get("token_caller", _NOT_LOOKED_UP)
    if caller is _NOT_LOOKED_UP:
        if secret is None:
            secret = _presented_token()
        caller = g.token_caller = find_caller(secret) if secret else None
    return caller


_NOT_LOOKED_UP = object()


def token_to_check():
    """The ``PresentedToken`` a ``checked_by_write`` view's write must check,
    or None: the caller is known (``g.caller``)."""
    return g.get("token_to_check")


def _unauthorized(message, presented):
    challenge = REALM + (', error="invalid_token"' if presented else "")
    return error_response(401, message, headers={"WWW-Authenticate": challenge})


def _refusal(caller, scope):
    """The 401 or 403 answer for ``caller`` (None: no valid token) lacking
    ``scope``; None if it has it."""
    if caller is None:
        return _unauthorized("The bearer token is malformed, unknown, revoked or expired.",
                             presented=True)
    if scope not in caller.scopes:
        return error_response(
            403, f"The token lacks the {scope!r} scope.",
            headers={"WWW-Authenticate":
                     f'{REALM}, error="insufficient_scope", scope="{scope}"'})
    return None


def require_scope(scope, checked_by_write=None):
    """View decorator: a valid bearer token with ``scope``, else 401/403.

    ``checked_by_write``: a function; when it says so for this request (the
    store's create checks tokens: PostgreSQL), unless the token was already
    looked up (by the rate limiter), the view runs with ``g.caller`` None and its
    write checks ``token_to_check()``, raising ``TokenRefused`` if it is not
    valid. Any answer but a success looks the token up first, so a request
    whose token is not valid is still answered 401/403 before anything else.
    """
    def decorate(view):
        @functools.wraps(view)
        def guarded(*args, **kwargs):
            secret = _presented_token()
            if secret is None:
                return _unauthorized("A bearer token is required.", presented=False)
            if checked_by_write and secret and "token_caller" not in g and checked_by_write():
                return _checked_by_write(view, scope, secret, args, kwargs)
            caller = authenticated_caller(secret)
            refusal = _refusal(caller, scope)
            if refusal is not None:
                return refusal
            g.caller = caller
            return view(*args, **kwargs)
        return guarded
    return decorate


def _checked_by_write(view, scope, secret, args, kwargs):
    """Run ``view`` leaving its token to its write (see ``require_scope``)."""
    g.caller, g.token_to_check = None, PresentedToken(digest(secret), scope)
    try:
        return view(*args, **kwargs)
    except TokenRefused:  # 401 or 403, as the token is now (or 401: it was not valid)
        return _refusal(authenticated_caller(), scope) or _refusal(None, scope)
    except HTTPException:
        refusal = _refusal(authenticated_caller(), scope)
        if refusal is not None:
            return refusal
        raise
