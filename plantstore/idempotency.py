"""``Idempotency-Key`` (draft-ietf-httpapi-idempotency-key-header) for creates.

A client that retries a create with the same key gets the first answer again
instead of a second effect. Keys belong to a user and live in the database
(``IdempotencyKey``), so every process and machine sees them:

- a request with a key runs in one database transaction that claims the
  key, runs the view and stores its answer, so a stored answer always
  matches what happened; the webhook events of a create go out once that
  transaction commits;
- the claim is held by that transaction and by nothing else: the key's row,
  inserted and not yet committed, and on PostgreSQL a transaction-level
  advisory lock on the key (``pg_try_advisory_xact_lock``; nothing kept in
  the session, so PgBouncer's transaction pooling is fine). Both end with
  the transaction: committed, rolled back, or its connection gone, so the
  key of a process that died is free as soon as the database notices;
- a stored answer comes first: the same key with the same method, path and
  arguments → the stored answer, with ``Idempotent-Replayed: true``,
  whatever else holds the key; different arguments → 422; a key with no
  stored answer that another request holds → 409 with ``Retry-After``, at
  once (the advisory lock is tried, never waited for);
- only success (2xx) is remembered: after a failure the transaction rolls
  back, key included, and a retry runs as if it were the first;
- a key is remembered for ``IDEMPOTENCY_TTL_HOURS`` from its first use, by
  the database's clock (``clock``); after that it is forgotten (its next use
  takes the row over; ``purge_expired_keys``, run by the webhook worker,
  deletes such rows in small batches).

On SQLite (one host) write transactions take turns (``BEGIN IMMEDIATE``,
see ``db.py``), so the transaction holding a key also holds the write lock:
a second request with the key waits its turn, like any write, and then
finds the stored answer. The same code runs there, with no advisory lock.
"""
import functools
import hashlib
import json
import logging

import marshmallow as ma
from flask import current_app, g, make_response, request
from flask_smorest import abort
from peewee import EXCLUDED, JOIN, SQL, Select, Value, fn

from . import clock
from .db import database, is_sqlite
from .models import IdempotencyKey

log = logging.getLogger(__name__)

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"

KEY_PATTERN = r"^[\x21-\x7e]([\x20-\x7e]{0,253}[\x21-\x7e])?$"
"""1 to 255 printable ASCII characters, taken verbatim (quotes included);
inner spaces are allowed, outer ones would be trimmed by HTTP."""

CLAIM_ATTEMPTS = 3
"""Claims one request tries before its 409. A request tries again only
when it holds the key's lock and its claim still missed the key, which
happens when the key's row changed between the two (the request holding it
answered, or the row was purged); the next try sees the change."""

PURGE_BATCH_SIZE = 500
"""Most expired keys one ``purge_expired_keys`` call deletes."""


class IdempotencyKeyHeaderSchema(ma.Schema):
    """The optional ``Idempotency-Key`` request header."""

    class Meta:
        unknown = ma.EXCLUDE

    idempotency_key = ma.fields.String(
        data_key=HEADER, validate=ma.validate.Regexp(
            KEY_PATTERN, error="Must be 1 to 255 printable ASCII characters."),
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


def _fingerprint(args, kwargs):
    """SHA-256 of the request's method, path and parsed arguments."""
    text = json.dumps([request.method, request.path, args, kwargs],
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def lock_number(user_id, key):
    """The PostgreSQL advisory lock (a signed 64-bit number) of user
    ``user_id``'s ``key``. Two keys whose numbers collide (a chance in 2**64)
    only cost each other a 409 while both are in progress."""
    text = f"idempotency-key {user_id} {key}".encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big", signed=True)


def _held(user_id, key):
    """SQL that is true when this transaction holds the key's advisory lock,
    taking it if it is free (never waiting); true on SQLite, whose write
    transactions take turns."""
    if is_sqlite():
        return SQL("1")
    return fn.pg_try_advisory_xact_lock(lock_number(user_id, key))


def _claim_query(user_id, key, fingerprint, held):
    """Insert the key's row, or take over a row past its time to live, if
    ``held``: returns the row's id when claimed, nothing otherwise."""
    ttl_seconds = current_app.config["IDEMPOTENCY_TTL_HOURS"] * 3600
    fresh = Select(columns=[Value(user_id), Value(key), Value(fingerprint),
                            clock.now(), clock.after(ttl_seconds)]).where(held)
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


def _look_query(user_id, key, held):
    """One row: whether this transaction holds the key's lock (taking it if
    it is free), then the key's committed row (fingerprint, status,
    content_type, body, expired), all null if there is none."""
    lock = Select(columns=[held.alias("held")]).alias("key_lock")
    return (Select(from_list=[lock], columns=[
                lock.c.held, IdempotencyKey.fingerprint, IdempotencyKey.status,
                IdempotencyKey.content_type, IdempotencyKey.body,
                IdempotencyKey.expires_at <= clock.now()])
            .join(IdempotencyKey, JOIN.LEFT_OUTER,
                  on=(IdempotencyKey.user == user_id) & (IdempotencyKey.key == key)))


def _replay(status, content_type, body):
    """A stored answer, marked as replayed."""
    response = current_app.response_class(body, status=status, content_type=content_type)
    response.headers[REPLAYED_HEADER] = "true"
    return response


def _claim(user_id, key, fingerprint):
    """Hold ``key`` in the current transaction: its row id, or the stored
    answer to replay; aborts with 422 (other arguments) or 409 (held by a
    request in progress)."""
    held = _held(user_id, key)
    for _ in range(CLAIM_ATTEMPTS):
        claimed = database.execute(_claim_query(user_id, key, fingerprint, held)).fetchone()
        if claimed:
            return claimed[0]
        is_held, stored_fingerprint, status, content_type, body, expired = (
            database.execute(_look_query(user_id, key, held)).fetchone())
        if status is not None and not expired:
            if stored_fingerprint != fingerprint:
                abort(422, message=f"This {HEADER} was used with a different request; "
                                   "use a new key for a new request.")
            return _replay(status, content_type, body)
        if not is_held:
            break
        # Free to take, yet the claim missed it: the key's row changed in
        # between (answered, purged, or rolled back); claim again.
    abort(409, message=f"A request with this {HEADER} is still in progress; "
                       "retry after it is answered.", headers={"Retry-After": "1"})


def _remember(row_id, response):
    """Store ``response`` as the answer of the claimed key ``row_id``."""
    (IdempotencyKey.update(status=response.status_code, content_type=response.content_type,
                           body=response.get_data(as_text=True))
     .where(IdempotencyKey.id == row_id).execute())


def idempotent(view):
    """Run ``view`` at most once per ``Idempotency-Key`` of the caller.

    The view receives the key as the ``idempotency_key`` keyword argument
    from ``IdempotencyKeyHeaderSchema`` (webargs); ``g.caller`` is set.
    With a key, the view runs inside the key's transaction; an answer that
    is not a success rolls that transaction back. Without a key the view
    runs as it would without this decorator.
    """
    @functools.wraps(view)
    def run(*args, idempotency_key=None, **kwargs):
        if idempotency_key is None:
            return view(*args, **kwargs)
        fingerprint = _fingerprint(args, kwargs)
        try:
            with database.atomic():
                claimed = _claim(g.caller.user_id, idempotency_key, fingerprint)
                if not isinstance(claimed, int):
                    return claimed
                response = make_response(view(*args, **kwargs))
                if not 200 <= response.status_code < 300:
                    raise _NotRemembered(response)
                _remember(claimed, response)
                return response
        except _NotRemembered as failure:
            return failure.response
    return run


def purge_expired_keys(batch_size=PURGE_BATCH_SIZE):
    """Delete up to ``batch_size`` keys past their time to live; how many were.

    A row taken over meanwhile by a new use of its key is live again and
    stays. Never raises (the caller is a worker's loop): a failure is
    logged and the next call tries again.
    """
    try:
        expired = (IdempotencyKey.select(IdempotencyKey.id)
                   .where(IdempotencyKey.expires_at <= clock.now()).limit(batch_size))
        return (IdempotencyKey.delete()
                .where(IdempotencyKey.id.in_(expired),
                       IdempotencyKey.expires_at <= clock.now())
                .execute())
    except Exception:
        log.warning("could not purge expired idempotency keys", exc_info=True)
        database.close()
        return 0
