"""``Idempotency-Key`` (draft-ietf-httpapi-idempotency-key-header) for creates.

A client that retries a create with the same key gets the first answer again
instead of a second effect. Keys belong to a user and live in the database
(``IdempotencyKey``), so every process and machine sees them:

- a request with a new key claims it (a short transaction of its own), then
  runs the view in one transaction that also stores the answer, so a stored
  answer always matches what happened; the webhook events of a create go out
  once that transaction commits;
- the same key with the same method, path and arguments → the stored answer,
  with ``Idempotent-Replayed: true``; different arguments → 422; a request
  still holding the key → 409;
- only success (2xx) is remembered: after a failure the key is free again,
  and a retry runs as if it were the first;
- a key is remembered for ``IDEMPOTENCY_TTL_HOURS`` from its first use;
  after that it is forgotten (``purge_expired_keys``, run by the webhook
  worker, deletes such rows in small batches).
"""
import datetime
import functools
import hashlib
import json
import logging

import marshmallow as ma
from flask import current_app, g, make_response, request
from flask_smorest import abort
from peewee import IntegrityError

from .db import database
from .models import IdempotencyKey, utcnow

log = logging.getLogger(__name__)

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"

KEY_PATTERN = r"^[\x21-\x7e]([\x20-\x7e]{0,253}[\x21-\x7e])?$"
"""1 to 255 printable ASCII characters, taken verbatim (quotes included);
inner spaces are allowed, outer ones would be trimmed by HTTP."""

LEASE_SECONDS = 60
"""How long a request holds a key at most: if its process dies, the key is
free again after this (longer than a create can take: its database wait
and its webhook attempt are both bounded well below it)."""

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


def _fingerprint(args, kwargs):
    """SHA-256 of the request's method, path and parsed arguments."""
    text = json.dumps([request.method, request.path, args, kwargs],
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _replay(row):
    """The stored answer of ``row``, marked as replayed."""
    response = current_app.response_class(row.body, status=row.status,
                                          content_type=row.content_type)
    response.headers[REPLAYED_HEADER] = "true"
    return response


def _take_over(row_id, condition, fingerprint, now):
    """Claim an existing row if ``condition`` still holds; True if claimed."""
    ttl = datetime.timedelta(hours=current_app.config["IDEMPOTENCY_TTL_HOURS"])
    return bool(IdempotencyKey.update(
        fingerprint=fingerprint, status=None, content_type=None, body=None,
        locked_until=now + datetime.timedelta(seconds=LEASE_SECONDS),
        created_at=now, expires_at=now + ttl)
        .where(IdempotencyKey.id == row_id, condition).execute())


def _claim(user_id, key, fingerprint):
    """Hold ``key`` for this request: its row id, or the stored answer to
    replay; aborts with 422 (other arguments) or 409 (held by another request)."""
    now = utcnow()
    ttl = datetime.timedelta(hours=current_app.config["IDEMPOTENCY_TTL_HOURS"])
    for _ in range(2):  # a second look if the row vanished in between
        try:
            with database.atomic():
                return IdempotencyKey.create(
                    user=user_id, key=key, fingerprint=fingerprint,
                    locked_until=now + datetime.timedelta(seconds=LEASE_SECONDS),
                    created_at=now, expires_at=now + ttl).id
        except IntegrityError:
            pass
        row = IdempotencyKey.get_or_none(IdempotencyKey.user == user_id,
                                         IdempotencyKey.key == key)
        if row is None:
            continue
        if row.expires_at <= now:  # forgotten: a new use of the key
            condition = IdempotencyKey.expires_at <= now
        elif row.fingerprint != fingerprint:
            abort(422, message=f"This {HEADER} was used with a different request; "
                               "use a new key for a new request.")
        elif row.locked_until is not None and row.locked_until > now:
            break
        elif row.status is not None:
            return _replay(row)
        else:  # its request died before answering: the key is free
            condition = IdempotencyKey.status.is_null() & (
                IdempotencyKey.locked_until.is_null()
                | (IdempotencyKey.locked_until <= now))
        if _take_over(row.id, condition, fingerprint, now):
            return row.id
    abort(409, message=f"A request with this {HEADER} is still in progress; "
                       "retry after it is answered.", headers={"Retry-After": "1"})


def _release(row_id, answered):
    """Let go of the key: keep the stored answer, or forget a key that has none."""
    try:
        if answered:
            (IdempotencyKey.update(locked_until=None)
             .where(IdempotencyKey.id == row_id).execute())
        else:
            (IdempotencyKey.delete()
             .where(IdempotencyKey.id == row_id, IdempotencyKey.status.is_null())
             .execute())
    except Exception:  # the lease runs out on its own
        log.warning("could not release idempotency key %s; it frees itself in %ss",
                    row_id, LEASE_SECONDS, exc_info=True)


def idempotent(view):
    """Run ``view`` at most once per ``Idempotency-Key`` of the caller.

    The view receives the key as the ``idempotency_key`` keyword argument
    from ``IdempotencyKeyHeaderSchema`` (webargs); ``g.caller`` is set.
    Without a key the view runs as it would without this decorator.
    """
    @functools.wraps(view)
    def run(*args, idempotency_key=None, **kwargs):
        if idempotency_key is None:
            return view(*args, **kwargs)
        claimed = _claim(g.caller.user_id, idempotency_key, _fingerprint(args, kwargs))
        if not isinstance(claimed, int):
            return claimed
        answered = False
        try:
            with database.atomic():
                response = make_response(view(*args, **kwargs))
                if 200 <= response.status_code < 300:
                    (IdempotencyKey.update(status=response.status_code,
                                           content_type=response.content_type,
                                           body=response.get_data(as_text=True))
                     .where(IdempotencyKey.id == claimed).execute())
                    answered = True
            return response
        finally:
            _release(claimed, answered)
    return run


def purge_expired_keys(batch_size=PURGE_BATCH_SIZE):
    """Delete up to ``batch_size`` keys past their time to live; how many were.

    Never raises (the caller is a worker's loop): a failure is logged and
    the next call tries again.
    """
    now = utcnow()
    expired = (IdempotencyKey.select(IdempotencyKey.id)
               .where(IdempotencyKey.expires_at <= now,
                      IdempotencyKey.locked_until.is_null()
                      | (IdempotencyKey.locked_until <= now))
               .limit(batch_size))
    try:
        return IdempotencyKey.delete().where(IdempotencyKey.id.in_(expired)).execute()
    except Exception:
        log.warning("could not purge expired idempotency keys", exc_info=True)
        database.close()
        return 0
