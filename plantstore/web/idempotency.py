"""``Idempotency-Key`` (draft-ietf-httpapi-idempotency-key-header) for creates.

A client that retries a create with the same key gets the first answer again
instead of a second effect. Keys belong to a user and live in the database
(``IdempotencyKey``), so every process and machine sees them:

- the key is claimed, and its answer stored, together with the create's
  effect: on PostgreSQL in the create's own statement (the view passes its
  answer, known before it writes, with ``answering``; the statement claims
  the key and writes nothing if it is taken, see ``webhooks/__init__.py``), so a keyed create costs
  the same statements as one without; on SQLite in one transaction that
  claims the key, runs the view and stores its answer. Either way a stored
  answer always matches what happened, and the webhook events of a create
  go out once it commits;
- the claim is held by that statement or transaction and by nothing else:
  the key's row, inserted and not yet committed, and on PostgreSQL a
  transaction-level advisory lock on the key (``pg_try_advisory_xact_lock``
  of ``plantstore_idempotency_key_lock``, migration 0009; nothing kept in
  the session, so PgBouncer's transaction pooling is fine).
  Both end with it, so a key is never left held by a process that died;
- a stored answer comes first: the same key with the same method, path and
  arguments → the stored answer, with ``Idempotent-Replayed: true``,
  whatever else holds the key; different arguments → 422; a key with no
  stored answer that another request holds → 409 with ``Retry-After``, at
  once (the advisory lock is tried, never waited for);
- only success (2xx) is remembered: after a failure nothing of the request
  is kept, key included, and a retry runs as if it were the first;
- a key is remembered for ``IDEMPOTENCY_TTL_HOURS`` from its first use, by
  the database's clock (``clock``); after that it is forgotten (its next use
  takes the row over; ``idempotency_keys.purge_expired_keys``, a maintenance task the webhook
  worker runs, deletes such rows in small batches).

On SQLite (one host) write transactions take turns (``BEGIN IMMEDIATE``,
see ``db``), so the transaction holding a key also holds the write lock:
a second request with the key waits its turn, like any write, and then
finds the stored answer. There is no advisory lock there.
"""
import dataclasses
import functools
import hashlib
import json

import marshmallow as ma
from flask import current_app, g, make_response, request
from flask_smorest import abort
from peewee import EXCLUDED, Select, Value

from ..db import clock, database
from ..db.models import IdempotencyKey
from .idempotency_keys import KeyTaken

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"

KEY_PATTERN = r"^[\x21-\x7e]([\x20-\x7e]{0,253}[\x21-\x7e])?$"
"""1 to 255 printable ASCII characters, taken verbatim (quotes included);
inner spaces are allowed, outer ones would be trimmed by HTTP."""

CLAIM_ATTEMPTS = 3
"""Statements one create tries before its 409 (PostgreSQL). It tries again
only when the key's lock was free and its claim still missed the key, which
happens when the key's row changed while the statement ran (the request
holding it answered, or the row was purged); the next try sees the change."""


class IdempotencyKeyHeaderSchema(ma.Schema):
    """The optional ``Idempotency-Key`` request header."""

    class Meta:
        unknown = ma.EXCLUDE

    idempotency_key = ma.fields.String(
        data_key=HEADER, validate=ma.validate.Regexp(
            KEY_PATTERN, error="Must be 1 to 255 printable ASCII characters, e.g. a UUID "
                               "such as 3f2b8c1e-9d4a-4e6f-8a7b-2c1d0e9f8a7b."),
        metadata={"description":
                  "A key unique to this request, chosen by the client (a UUID, say), "
                  "to retry it safely: the same key and body again get the first "
                  "answer, with `Idempotent-Replayed: true`, and nothing happens twice. "
                  "The same key with another body is a 422; while the first request "
                  "is still in progress, a 409. Keys are per user and remembered for "
                  "24 hours (configurable).",
                  "maxLength": 255, "minLength": 1})


class _NotRemembered(Exception):
    """Rolls back the transaction of an answer that is not a success."""

    def __init__(self, response):
        super().__init__(response.status)
        self.response = response


@dataclasses.dataclass(frozen=True)
class KeyClaim:
    """A key of the plant's owner that a create's own statement claims on
    PostgreSQL, with the answer it stores (``status``, ``content_type``,
    ``body``: see ``answering``)."""
    key: str
    fingerprint: str
    ttl_seconds: float
    status: int | None = None
    content_type: str | None = None
    body: str | None = None


def answering(response):
    """This request's key claim with ``response`` as its answer, for the
    view's write to carry (PostgreSQL), or None: no key, or SQLite (where
    the decorator's transaction claims the key)."""
    claim = g.get("key_claim")
    if claim is None:
        return None
    g.key_claimed = True
    return dataclasses.replace(claim, status=response.status_code,
                               content_type=response.content_type,
                               body=response.get_data(as_text=True))


def _fingerprint(args, kwargs):
    """SHA-256 of the request's method, path and parsed arguments."""
    text = json.dumps([request.method, request.path, args, kwargs],
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _claim_query(user_id, key, fingerprint):
    """Insert the key's row, or take over a row past its time to live (or
    without an answer): returns the row's id when claimed, nothing otherwise."""
    ttl_seconds = current_app.config["IDEMPOTENCY_TTL_HOURS"] * 3600
    fresh = Select(columns=[Value(user_id), Value(key), Value(fingerprint),
                            clock.now(), clock.after(ttl_seconds)])
    fields = [IdempotencyKey.user, IdempotencyKey.key, IdempotencyKey.fingerprint,
              IdempotencyKey.created_at, IdempotencyKey.expires_at]
    return (IdempotencyKey.insert_from(fresh, fields)
            .on_conflict(conflict_target=[IdempotencyKey.user, IdempotencyKey.key],
                         update={IdempotencyKey.fingerprint: EXCLUDED.fingerprint,
                                 IdempotencyKey.status: None,
                                 IdempotencyKey.content_type: None,
                                 IdempotencyKey.body: None,
                                 IdempotencyKey.created_at: EXCLUDED.created_at,
                                 IdempotencyKey.expires_at: EXCLUDED.expires_at},
                         where=(IdempotencyKey.expires_at <= clock.now())
                         | IdempotencyKey.status.is_null())
            .returning(IdempotencyKey.id))


def _look_query(user_id, key):
    """The key's row: fingerprint, status, content type, body, expired."""
    return (IdempotencyKey.select(
                IdempotencyKey.fingerprint, IdempotencyKey.status,
                IdempotencyKey.content_type, IdempotencyKey.body,
                IdempotencyKey.expires_at <= clock.now())
            .where(IdempotencyKey.user == user_id, IdempotencyKey.key == key))


def _replay(status, content_type, body):
    """A stored answer, marked as replayed."""
    response = current_app.response_class(body, status=status, content_type=content_type)
    response.headers[REPLAYED_HEADER] = "true"
    return response


def _stored_answer(found, fingerprint):
    """The replay of a key's stored answer ``found`` (fingerprint, status,
    content type, body, expired), None if it has none; 422 if it was given
    to another request."""
    stored_fingerprint, status, content_type, body, expired = found
    if status is None or expired:
        return None
    if stored_fingerprint != fingerprint:
        abort(422, message=f"This {HEADER} was used with a different request; "
                           "use a new key for a new request.")
    return _replay(status, content_type, body)


def _in_progress():
    abort(409, message=f"A request with this {HEADER} is still in progress; "
                       "retry after it is answered.", headers={"Retry-After": "1"})


def _claim(user_id, key, fingerprint):
    """Hold ``key`` in the current transaction (on SQLite, which holds the
    write lock meanwhile): its row id, or the stored answer to replay;
    aborts with 422 (other arguments) or 409 (no answer stored)."""
    claimed = database.execute(_claim_query(user_id, key, fingerprint)).fetchone()
    if claimed:
        return claimed[0]
    found = database.execute(_look_query(user_id, key)).fetchone()
    stored = _stored_answer(found, fingerprint) if found else None
    if stored is None:
        _in_progress()
    return stored


def store_answer(row_id, response):
    """Store ``response`` as the answer of the claimed key ``row_id``: on
    SQLite the last write of a keyed create's transaction, where its plant
    and key are written and nothing is committed yet."""
    (IdempotencyKey.update(status=response.status_code, content_type=response.content_type,
                           body=response.get_data(as_text=True))
     .where(IdempotencyKey.id == row_id).execute())


def idempotent(view, claimed_by_write=None):
    """Run ``view`` at most once per ``Idempotency-Key`` of the caller.

    The view receives the key as the ``idempotency_key`` keyword argument
    from ``IdempotencyKeyHeaderSchema`` (webargs).
    Without a key the view runs as it would without this decorator. With
    one, when the function ``claimed_by_write`` says so for this request
    (the store's create claims keys: PostgreSQL) the view's write must carry
    ``answering(answer)`` (an answer of 2xx without it is a programming
    error); otherwise the view runs inside the key's transaction, and an
    answer that is not a success rolls that transaction back.
    """
    @functools.wraps(view)
    def run(*args, idempotency_key=None, **kwargs):
        if idempotency_key is None:
            return view(*args, **kwargs)
        fingerprint = _fingerprint(args, kwargs)
        if claimed_by_write is None or not claimed_by_write():
            return _run_in_key_transaction(view, args, kwargs, idempotency_key, fingerprint)
        claim = KeyClaim(idempotency_key, fingerprint,
                         current_app.config["IDEMPOTENCY_TTL_HOURS"] * 3600)
        for _ in range(CLAIM_ATTEMPTS):
            g.key_claim, g.key_claimed = claim, False
            try:
                response = make_response(view(*args, **kwargs))
            except KeyTaken as taken:
                stored = _stored_answer(taken.found, fingerprint)
                if stored is not None:
                    return stored
                if not taken.held:
                    break
                continue  # free, yet taken: its row changed meanwhile; claim again
            finally:
                g.pop("key_claim", None)
            if 200 <= response.status_code < 300 and not g.key_claimed:
                raise RuntimeError(f"{view.__name__} answered {response.status} "
                                   f"without storing its {HEADER} (see answering)")
            return response
        _in_progress()
    return run


def _run_in_key_transaction(view, args, kwargs, key, fingerprint):
    """Claim ``key``, run ``view`` and store its answer in one transaction."""
    try:
        with database.atomic():
            claimed = _claim(g.caller.user_id, key, fingerprint)
            if not isinstance(claimed, int):
                return claimed
            response = make_response(view(*args, **kwargs))
            if not 200 <= response.status_code < 300:
                raise _NotRemembered(response)
            store_answer(claimed, response)
            return response
    except _NotRemembered as failure:
        return failure.response
