"""Bearer tokens (RFC 6750): issue, hash, verify, revoke, and the 401/403 answers.

A token is ``<prefix><43 url-safe characters>`` (256 bits of entropy). Only
its SHA-256 digest is stored; a request's token is hashed, found by digest
and the digests compared in constant time. Expiry and revocation times are
the database's (``clock``): set by it, and compared with its now in the
statement that finds the token, so hosts whose clocks disagree agree on
which tokens are valid.
"""
import functools
import hashlib
import hmac
import secrets
from dataclasses import dataclass

from flask import g, request

from . import clock
from .db import Statement
from .errors import error_response
from .models import Token

READ, WRITE = "plants:read", "plants:write"
WEBHOOKS_READ, WEBHOOKS_WRITE = "webhooks:read", "webhooks:write"
ALL_SCOPES = (READ, WRITE, WEBHOOKS_READ, WEBHOOKS_WRITE)
REALM = 'Bearer realm="plantstore"'


@dataclass(frozen=True)
class Caller:
    """Who is calling, as far as authorization cares."""
    user_id: int
    is_admin: bool
    scopes: frozenset


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


# Every authenticated request runs this lookup (see db.Statement); expiry is
# judged by the database's clock, in the statement.
_VALID_TOKEN = Statement(
    'SELECT t.digest, t.scopes, u.id, u.is_admin FROM token t JOIN "user" u ON u.id = t.user_id'
    " WHERE t.digest = {p} AND t.revoked_at IS NULL"
    " AND (t.expires_at IS NULL OR t.expires_at > {now})")


def find_caller(secret):
    """The Caller a presented token stands for, or None if it is not valid now."""
    wanted = digest(secret)
    rows = _VALID_TOKEN.rows(wanted)
    if not rows:
        return None
    stored, scopes, user_id, is_admin = rows[0]
    if not hmac.compare_digest(stored, wanted):
        return None
    return Caller(user_id, bool(is_admin), frozenset(scopes.split()))


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


def authenticated_caller():
    """The Caller of the request's bearer token (None if absent or not valid now),
    looked up once per request however many times it is asked for."""
    if "token_caller" not in g:
        secret = _presented_token()
        g.token_caller = find_caller(secret) if secret else None
    return g.token_caller


def _unauthorized(message, presented):
    challenge = REALM + (', error="invalid_token"' if presented else "")
    return error_response(401, message, headers={"WWW-Authenticate": challenge})


def require_scope(scope):
    """View decorator: a valid bearer token with ``scope``, else 401/403."""
    def decorate(view):
        @functools.wraps(view)
        def guarded(*args, **kwargs):
            secret = _presented_token()
            if secret is None:
                return _unauthorized("A bearer token is required.", presented=False)
            caller = authenticated_caller()
            if caller is None:
                return _unauthorized(
                    "The bearer token is malformed, unknown, revoked or expired.",
                    presented=True)
            if scope not in caller.scopes:
                return error_response(
                    403, f"The token lacks the {scope!r} scope.",
                    headers={"WWW-Authenticate":
                             f'{REALM}, error="insufficient_scope", scope="{scope}"'})
            g.caller = caller
            return view(*args, **kwargs)
        return guarded
    return decorate
