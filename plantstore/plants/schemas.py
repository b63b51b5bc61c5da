"""The documented shapes of plants: the contract clients are generated from.

``Plant`` is what the service answers, ``NewPlant`` what a client sends to
create one (and what webhook receivers get), ``PlantQueryArgs`` the list's
query string.
"""
import re
from decimal import Decimal

import marshmallow as ma
from marshmallow import validate

from ..api import QueryArgsSchema

INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1
INT32_MAX = 2 ** 31 - 1
NAME_MAX_LENGTH = TAG_MAX_LENGTH = 255


class Int64(ma.fields.Integer):
    """An integer of a JSON body within int64; strict: no strings or booleans.

    A JSON number written with a zero fraction or an exponent (``12.0``,
    ``1.2e1``) is an integer to JSON Schema, so the document allows it: the
    body parser reads such numbers as exact Decimals and this field takes
    the integral ones.
    """

    def __init__(self, **kwargs):
        self.int64_range = validate.Range(INT64_MIN, INT64_MAX)
        super().__init__(strict=True, validate=self.int64_range,
                         metadata={"format": "int64", **kwargs.pop("metadata", {})},
                         **kwargs)

    def _validated(self, value):
        if isinstance(value, bool):
            raise self.make_error("invalid")
        if isinstance(value, Decimal):
            if not value.is_finite() or value != value.to_integral_value():
                raise self.make_error("invalid")
            # Compared as a Decimal first: int() of 1e999999999 would not end.
            value = int(self.int64_range(value))
        return super()._validated(value)


class IntegerText(ma.fields.Integer):
    """An integer written in a query string or a path segment: every one of them.

    ASCII digits with an optional leading ``-``, nothing else: Python's
    ``int()`` would also take ``1_0``, ``+1``, spaces and non-ASCII digits.
    With ``json_spellings`` (the plant id in the path) an integral number
    written as a JSON body may write it (``12.0``, ``1.2e1``) is taken too,
    so the id a create sent always names its plant. Values outside
    ``minimum``..``maximum`` are refused with the bound named, before
    ``int()`` runs on thousands of digits.
    """
    DIGITS = re.compile(r"-?[0-9]+")
    JSON_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")
    default_error_messages = {
        "invalid": "Must be an integer: ASCII digits with an optional leading -.",
        "too_small": "Must be greater than or equal to {minimum}.",
        "too_large": "Must be less than or equal to {maximum}.",
    }

    def __init__(self, minimum, maximum, json_spellings=False, **kwargs):
        self.minimum, self.maximum = minimum, maximum
        self.written = self.JSON_NUMBER if json_spellings else self.DIGITS
        metadata = {"minimum": minimum, "maximum": maximum, **kwargs.pop("metadata", {})}
        super().__init__(metadata=metadata, **kwargs)

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, str) or not self.written.fullmatch(value):
            raise self.make_error("invalid")
        number = Decimal(value)
        if number != number.to_integral_value():
            raise self.make_error("invalid")
        if number < self.minimum:
            raise self.make_error("too_small", minimum=self.minimum)
        if number > self.maximum:
            raise self.make_error("too_large", maximum=self.maximum)
        return int(number)


class Text(ma.fields.String):
    """A string that every supported database can store as it is.

    PostgreSQL refuses NUL characters and no database takes unpaired
    surrogates (which JSON's \\ud800 escapes can produce), so both are
    refused here with a 400 instead of failing at the database. The
    document says so too, with a pattern that excludes NUL.
    """
    NO_NUL_PATTERN = "^[^\\u0000]*$"  # JSON Schema (ECMA 262) regex syntax

    def __init__(self, **kwargs):
        metadata = {"pattern": self.NO_NUL_PATTERN, **kwargs.pop("metadata", {})}
        super().__init__(metadata=metadata, **kwargs)

    def _deserialize(self, value, attr, data, **kwargs):
        text = super()._deserialize(value, attr, data, **kwargs)
        if "\x00" in text:
            raise ma.ValidationError("Must not contain NUL characters.")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ma.ValidationError("Must be valid Unicode text.") from None
        return text


class PlantSchema(ma.Schema):
    """A plant as the service shows it: never its id, no tag key when unset."""

    class Meta:
        ordered = True

    name = Text(required=True, validate=validate.Length(1, NAME_MAX_LENGTH),
                metadata={"description": "The name of the plant"})
    tag = Text(validate=validate.Length(max=TAG_MAX_LENGTH),
               metadata={"description": "Tag to specify the type"})

    @ma.post_dump
    def drop_unset_tag(self, data, **kwargs):
        if data.get("tag") is None:
            data.pop("tag", None)
        return data


class NewPlantSchema(PlantSchema):
    """A plant to add to the store, with the id its client chose."""

    class Meta:
        ordered = True
        unknown = ma.EXCLUDE

    id = Int64(required=True, metadata={"description": "Identification number of the plant"})


class PlantQueryArgsSchema(QueryArgsSchema):
    """GET /plants query: page size and the keyset cursor of the next page."""
    limit = IntegerText(1, INT32_MAX, metadata={
        "description": "The maximum number of results to return", "format": "int32"})
    after = IntegerText(INT64_MIN, INT64_MAX, metadata={
        "format": "int64",
        "description": "Cursor: list only plants whose id is greater than this "
                       "(taken from the Link header of the previous page)"})


def plant_json(name, tag):
    """The dict ``PlantSchema().dump`` makes of a stored plant's name and tag,
    built directly; tests prove the two equal for every stored name and tag."""
    # Kept for GET /plants?limit=100: 66 % more requests per second than
    # PlantSchema(many=True).dump (in-process test client on SQLite, median
    # of 31 alternating runs).
    return {"name": name} if tag is None else {"name": name, "tag": tag}
