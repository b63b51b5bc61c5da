"""The documented shapes of the webhook routes: subscriptions, deliveries
with their attempts, and what clients send to make or recover them.

Secrets appear in two answers only (a new subscription, a rotation) and
bearer tokens in none.
"""
import marshmallow as ma
from marshmallow import validate

from ...db.models import Delivery
from ...web.fields import IntegerText, QueryArgsSchema, Text, UtcDateTime, UtcTimestamp
from ..receivers.registration import (
    BEARER_MAX_LENGTH,
    BEARER_PATTERN,
    RATE_LIMIT_MAX,
    URL_EXAMPLE,
    URL_MAX_LENGTH,
    bearer_problem,
    url_problem,
)

LIMIT_MAX = 100
ROW_ID_MAX = 2 ** 31 - 1
"""The largest subscription id (a 32-bit column on PostgreSQL)."""
DELIVERY_ID_MAX = 2 ** 63 - 1
"""The largest delivery id (64-bit since migration 0013)."""


def refusing(problem_of):
    """A marshmallow validator refusing a value for which ``problem_of``
    (``registration.url_problem``, ...) tells a problem, with its sentence."""
    def validator(value):
        problem = problem_of(value)
        if problem:
            raise ma.ValidationError(problem)
    return validator


def rate_limit_field(description):
    """A subscription's ``rate_limit``: deliveries per second, or null for none."""
    expected = (f"Must be a whole number of deliveries a second from 1 to {RATE_LIMIT_MAX}, "
                "e.g. 5, or null for no limit.")
    return ma.fields.Integer(strict=True, allow_none=True,
                             validate=validate.Range(1, RATE_LIMIT_MAX, error=expected),
                             error_messages={"invalid": expected}, metadata={
                                 "description": description, "example": 5})


def unknown_fields_refused(fields, example):
    """A body schema's messages for a field it does not have (a 400 naming
    it: a misspelt field is never dropped) and for a body that is no object."""
    return {"unknown": f"Unknown field: send {fields} only, e.g. {example}.",
            "type": f"The body must be a JSON object, e.g. {example}."}


class NewSubscriptionSchema(ma.Schema):
    """A receiver to register: where to POST, the token it expects, and how
    many deliveries a second it takes."""

    class Meta:
        ordered = True
        unknown = ma.RAISE

    error_messages = unknown_fields_refused("url, bearer and rate_limit",
                                            f'{{"url": {URL_EXAMPLE}}}')

    url = Text(required=True, validate=refusing(url_problem), error_messages={
        "required": 'Required: where to send events, e.g. '
                    '"url": "https://hooks.example.com/plantstore".',
        "invalid": 'Must be a string, e.g. "https://hooks.example.com/plantstore".',
        "null": 'Must be a string, e.g. "https://hooks.example.com/plantstore", not null.',
    }, metadata={
        "description": "An http:// or https:// URL that resolves only to public "
                       "addresses (unless the operator allows more); no credentials.",
        "example": "https://hooks.example.com/plantstore",
        "minLength": 1, "maxLength": URL_MAX_LENGTH})
    bearer = Text(example="rcv-token-1", validate=refusing(bearer_problem), error_messages={
        "null": 'Must be a string, e.g. "rcv-token-1"; leave bearer out for none.',
    }, metadata={
        "description": "Sent to the receiver as `Authorization: Bearer <bearer>`.",
        "pattern": BEARER_PATTERN, "minLength": 1, "maxLength": BEARER_MAX_LENGTH})
    rate_limit = rate_limit_field(
        "Most deliveries per second sent to the receiver (first attempts and retries "
        "together); absent or null: no limit.")


class UpdatedSubscriptionSchema(ma.Schema):
    """What a PATCH changes: any of the URL, the bearer token and the rate
    limit (null removes a bearer token or a limit); fields left out stay."""

    class Meta:
        ordered = True
        unknown = ma.RAISE

    error_messages = unknown_fields_refused("any of url, bearer and rate_limit",
                                            '{"rate_limit": 5}')

    url = Text(validate=refusing(url_problem), metadata={
        "description": "A new URL, checked as at registration.",
        "example": "https://hooks.example.com/plantstore",
        "minLength": 1, "maxLength": URL_MAX_LENGTH})
    bearer = Text(example="rcv-token-1", allow_none=True, validate=refusing(bearer_problem),
                  metadata={
        "description": "A new token sent as `Authorization: Bearer <bearer>`; null: "
                       "send none.",
        "pattern": BEARER_PATTERN, "minLength": 1, "maxLength": BEARER_MAX_LENGTH})
    rate_limit = rate_limit_field("A new most deliveries per second; null: no limit.")

    @ma.validates_schema
    def changes_something(self, data, **kwargs):
        if not data:
            raise ma.ValidationError("Give at least one of url, bearer and rate_limit, "
                                     'e.g. {"rate_limit": 5}.')


class SubscriptionSchema(ma.Schema):
    """A subscription as its owner sees it (never its secret or bearer token)."""

    class Meta:
        ordered = True

    id = ma.fields.Integer(required=True)
    url = ma.fields.String(required=True)
    active = ma.fields.Boolean(required=True, attribute="is_active")
    owner = ma.fields.Function(
        lambda subscription: subscription.owner.name if subscription.owner_id else None,
        allow_none=True, metadata={"type": "string", "description":
                                   "The user who registered it; null for an "
                                   "operator's subscription (hears every plant)."})
    rate_limit = ma.fields.Integer(allow_none=True, metadata={
        "description": "Most deliveries per second sent to it; null: no limit."})
    disabled_at = UtcDateTime(allow_none=True)
    disabled_reason = ma.fields.String(allow_none=True, metadata={
        "description": "Why plantstore stopped sending (a 410, or sustained failure)."})
    created_at = UtcDateTime(required=True)


class CreatedSubscriptionSchema(ma.Schema):
    """A new subscription, with its signing secret (shown only this once)."""

    class Meta:
        ordered = True

    id = ma.fields.Integer(required=True)
    url = ma.fields.String(required=True)
    active = ma.fields.Boolean(required=True, attribute="is_active")
    secret = ma.fields.String(required=True, metadata={
        "description": "The whsec_ signing secret; it is never shown again."})


class RotatedSecretSchema(ma.Schema):
    """A subscription's new signing secret."""

    class Meta:
        ordered = True

    secret = ma.fields.String(required=True, metadata={
        "description": "The new whsec_ secret; it is never shown again."})
    previous_secret_expires_at = UtcDateTime(required=True, metadata={
        "description": "Until then the replaced secret signs too (every secret "
                       "rotated out signs until its own overlap ends; at most "
                       "four at once)."})


class ResponseSchema(ma.Schema):
    """What a receiver answered to one attempt."""

    class Meta:
        ordered = True

    status = ma.fields.Integer(required=True, metadata={
        "description": "The HTTP status the receiver answered."})
    duration_ms = ma.fields.Integer(required=True, metadata={
        "description": "From sending the request to the end of the answer."})
    body = ma.fields.String(allow_none=True, required=True, metadata={
        "description": "The first 1,024 characters of the answer's body (NUL and "
                       "invalid UTF-8 replaced by U+FFFD); null when it was empty."})


class AttemptSchema(ma.Schema):
    """One try at sending a delivery."""

    class Meta:
        ordered = True

    at = UtcDateTime(required=True, attribute="started_at")
    status_code = ma.fields.Integer(allow_none=True, required=True, metadata={
        "description": "The receiver's HTTP status; null when it gave none."})
    error = ma.fields.String(allow_none=True, required=True, metadata={
        "description": "What went wrong (connection, timeout, the start of a "
                       "non-2xx answer); null on success."})
    duration_ms = ma.fields.Integer(required=True)
    response = ma.fields.Nested(ResponseSchema, allow_none=True, required=True, metadata={
        "description": "The receiver's answer; null when it gave no HTTP answer "
                       "(refused, timed out, cut by the deadline)."})


class DeliverySchema(ma.Schema):
    """One event for one subscription, with every attempt at it."""

    class Meta:
        ordered = True

    id = ma.fields.Integer(required=True)
    webhook_id = ma.fields.String(required=True, attribute="message_id", metadata={
        "description": "The webhook-id header, the same on every attempt."})
    event = ma.fields.String(required=True, attribute="event_type", metadata={
        "description": "plant.created, or plant.test for a test event."})
    status = ma.fields.String(required=True, validate=validate.OneOf(
        [Delivery.PENDING, Delivery.DELIVERED, Delivery.FAILED]))
    created_at = UtcDateTime(required=True)
    next_attempt_at = UtcDateTime(allow_none=True, attribute="next_attempt", metadata={
        "description": "When a pending delivery is tried next; null otherwise."})
    delivered_at = UtcDateTime(allow_none=True)
    last_error = ma.fields.String(allow_none=True)
    attempts = ma.fields.List(ma.fields.Nested(AttemptSchema), required=True,
                              attribute="attempt_rows")


class DeliveryQueryArgsSchema(QueryArgsSchema):
    """GET /webhooks/{id}/deliveries query: a state, a page size, a cursor."""
    status = ma.fields.String(validate=validate.OneOf(
        [Delivery.PENDING, Delivery.DELIVERED, Delivery.FAILED],
        error="Must be one of {choices}, e.g. failed."), metadata={"example": "failed"})
    limit = IntegerText(1, LIMIT_MAX, load_default=20, example=20,
                        metadata={"description": "Deliveries per page"})
    after = IntegerText(1, DELIVERY_ID_MAX, example=4711, metadata={
        "description": "Cursor: only deliveries older than this one (taken from "
                       "the Link header of the previous page)"})


class RecoverSchema(ma.Schema):
    """Which failed deliveries to send again: those created since a time."""

    class Meta:
        unknown = ma.RAISE

    error_messages = unknown_fields_refused("since", '{"since": "2026-01-31T09:00:00Z"}')

    since = UtcTimestamp(required=True, error_messages={
        "required": 'Required: send again what failed since when, e.g. '
                    '"since": "2026-01-31T09:00:00Z".',
    }, metadata={
        "description": "An RFC 3339 time with its offset, e.g. 2026-01-31T12:00:00Z."})


class RecoveredSchema(ma.Schema):
    """How many failed deliveries were queued again."""
    queued = ma.fields.Integer(required=True)
