"""The pieces every resource's documented shapes share: fields that read
what clients send the same way on every route, and the base of every
query-string schema.

- ``Text``: a string every supported database stores as it is;
- ``IntegerText``: an integer written in a query string or a path segment;
- ``UtcTimestamp``: a time a client sends (RFC 3339 with its offset), as
  stored times are: naive UTC, or a 400 naming the field;
- ``UtcDateTime``: a stored time shown in RFC 3339 with its ``Z``;
- ``QueryArgsSchema``: a query string whose arguments each come once.
"""
import datetime
import json
import re
from decimal import Decimal, InvalidOperation

import marshmallow as ma


class Text(ma.fields.String):
    """A string that every supported database can store as it is.

    PostgreSQL refuses NUL characters and no database takes unpaired
    surrogates (which JSON's \\ud800 escapes can produce), so both are
    refused here with a 400 instead of failing at the database. The
    document says so too, with a pattern that excludes NUL. Every refusal
    shows ``example`` (a valid value; the metadata's example by default).
    """
    NO_NUL_PATTERN = "^[^\\u0000]*$"  # JSON Schema (ECMA 262) regex syntax

    def __init__(self, example=None, **kwargs):
        metadata = {"pattern": self.NO_NUL_PATTERN, **kwargs.pop("metadata", {})}
        shown = json.dumps(example or metadata.get("example") or "text")
        self.expected = f"Must be a string, e.g. {shown}"
        error_messages = {"invalid": f"{self.expected}.", "null": f"{self.expected}, not null.",
                          "required": f"Required, e.g. {shown}.",
                          "nul": f"Must not contain NUL characters, e.g. {shown}.",
                          "unicode": f"Must be valid Unicode text (no unpaired "
                                     f"surrogates), e.g. {shown}.",
                          **kwargs.pop("error_messages", {})}
        super().__init__(metadata=metadata, error_messages=error_messages, **kwargs)

    def _deserialize(self, value, attr, data, **kwargs):
        text = super()._deserialize(value, attr, data, **kwargs)
        if "\x00" in text:
            raise self.make_error("nul")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise self.make_error("unicode") from None
        return text


class IntegerText(ma.fields.Integer):
    """An integer written in a query string or a path segment: every one of them.

    ASCII digits with an optional leading ``-``, nothing else: Python's
    ``int()`` would also take ``1_0``, ``+1``, spaces and non-ASCII digits.
    With ``json_spellings`` (the plant id in the path) an integral number
    written as a JSON body may write it (``12.0``, ``1.2e1``) is taken too,
    so the id a create sent always names its plant. Values outside
    ``minimum``..``maximum`` are refused with the bound named, before
    ``int()`` runs on thousands of digits, and so are exponents past what
    a ``Decimal`` holds. Every refusal shows ``example`` (42 unless given).
    """
    DIGITS = re.compile(r"-?[0-9]+")
    JSON_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")
    default_error_messages = {
        "invalid": "Must be an integer: ASCII digits with an optional leading -, "
                   "e.g. {example}.",
        "too_small": "Must be greater than or equal to {minimum}, e.g. {example}.",
        "too_large": "Must be less than or equal to {maximum}, e.g. {example}.",
        "unreadable": "Must be an integer from {minimum} to {maximum}, e.g. {example}; "
                      "this one's exponent is out of range.",
    }

    def __init__(self, minimum, maximum, json_spellings=False, example=42, **kwargs):
        self.minimum, self.maximum, self.example = minimum, maximum, example
        self.written = self.JSON_NUMBER if json_spellings else self.DIGITS
        metadata = {"minimum": minimum, "maximum": maximum, **kwargs.pop("metadata", {})}
        super().__init__(metadata=metadata, **kwargs)

    def _deserialize(self, value, attr, data, **kwargs):
        bounds = {"minimum": self.minimum, "maximum": self.maximum, "example": self.example}
        if not isinstance(value, str) or not self.written.fullmatch(value):
            raise self.make_error("invalid", **bounds)
        try:
            number = Decimal(value)
        except InvalidOperation:  # an exponent past Decimal's: 1e99999999999999999999
            raise self.make_error("unreadable", **bounds) from None
        if number != number.to_integral_value():
            raise self.make_error("invalid", **bounds)
        if number < self.minimum:
            raise self.make_error("too_small", **bounds)
        if number > self.maximum:
            raise self.make_error("too_large", **bounds)
        return int(number)


def naive_utc(moment):
    """An aware ``moment`` as stored times are: naive UTC.

    ``OverflowError`` when UTC has no such time: the moment's date is in
    year 1 or 9999 and its offset takes it outside years 1 to 9999
    (``0001-01-01T00:00:00+14:00``).
    """
    return moment.astimezone(datetime.timezone.utc).replace(tzinfo=None)


class StrictBoolean(ma.fields.Boolean):
    """JSON's ``true`` or ``false`` only: not ``1``, ``"true"`` or ``"yes"``,
    which marshmallow's ``Boolean`` takes, and which a schema saying
    ``boolean`` refuses."""

    default_error_messages = {"invalid": "Must be true or false."}

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, bool):
            raise self.make_error("invalid")
        return value


class UtcTimestamp(ma.fields.AwareDateTime):
    """A time a client sends: RFC 3339 with its offset (``Z`` or ``+02:00``),
    loaded as naive UTC, the way times are stored.

    A time that is valid in its own offset but falls outside years 1 to
    9999 in UTC is refused like any other malformed time (a 400 naming the
    field), never an error of the server.
    """
    EXPECTED = "Must be an RFC 3339 time with its offset, e.g. 2026-01-31T09:00:00Z"
    default_error_messages = {
        "invalid": f"{EXPECTED} or 2026-01-31T10:00:00+01:00.",
        "invalid_awareness": "Must give its offset (Z or +01:00), e.g. 2026-01-31T09:00:00Z.",
        "null": f"{EXPECTED}, not null.",
        "out_of_range": "Must be a time between 0001-01-01T00:00:00Z and "
                        "9999-12-31T23:59:59Z once converted to UTC.",
    }

    def _deserialize(self, value, attr, data, **kwargs):
        moment = super()._deserialize(value, attr, data, **kwargs)
        try:
            return naive_utc(moment)
        except OverflowError:
            raise self.make_error("out_of_range") from None


class UtcDateTime(ma.fields.DateTime):
    """A stored (naive UTC) time, shown in RFC 3339 with its Z."""

    def _serialize(self, value, attr, obj, **kwargs):
        if value is None:
            return None
        return value.replace(tzinfo=datetime.timezone.utc).isoformat().replace("+00:00", "Z")


class QueryArgsSchema(ma.Schema):
    """A query string's arguments: each may be given once (``?limit=1&limit=1000``
    is ambiguous, so a 400 rather than picking one)."""

    @ma.pre_load
    def refuse_repeated_parameters(self, data, **kwargs):
        repeated = {name: [f"Must be given at most once, e.g. ?{name}="
                           f"{field.metadata.get('example', getattr(field, 'example', 1))}."]
                    for name, field in self.fields.items() if len(data.getlist(name)) > 1}
        if repeated:
            raise ma.ValidationError(repeated)
        return data
