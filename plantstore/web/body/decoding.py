"""A client's JSON body, read exactly and never into a 500.

- Numbers with a fraction or an exponent become exact ``Decimal``s (JSON
  Schema counts ``12.0`` as an integer; a float would round large ids);
  integer literals longer than ``LONGEST_INT_LITERAL`` digits too (Python's
  ``int()`` refuses more than 4300 digits).
- A number no ``Decimal`` can hold (its exponent past about ±10**18:
  ``1e99999999999999999999``) and the ``NaN``/``Infinity`` literals, which
  are not JSON, are a 400 naming the field they are in, ignored fields too.
- Nesting deeper than the parser's recursion allows is a 400.

The first read is the plain one; only a body that fails it is read again,
with each unreadable number marked, to name where it is.
"""
import json
from decimal import Decimal, InvalidOperation

from flask_smorest import abort

LONGEST_INT_LITERAL = 100

UNREADABLE_NUMBER = ("This number cannot be read: its exponent is out of range; "
                     "write numbers such as 12, 1.5 or 2.5e10.")
NOT_JSON_NUMBER = "{literal} is not a JSON number; send a number such as 12 or 1.5."


class _Unreadable(ValueError):
    """A number the body holds that cannot be read (only raised on the first read)."""


class _Marked:
    """Where the second read found a number that cannot be read, and why."""

    def __init__(self, message):
        self.message = message


def _parse_int(text):
    """An integer literal: an int, or a Decimal when very long."""
    return int(text) if len(text) <= LONGEST_INT_LITERAL else Decimal(text)


def _parse_float(text):
    try:
        return Decimal(text)
    except InvalidOperation:
        raise _Unreadable() from None


def _refuse_constant(literal):
    raise _Unreadable()


def _mark_float(text):
    try:
        return Decimal(text)
    except InvalidOperation:
        return _Marked(UNREADABLE_NUMBER)


def _mark_constant(literal):
    return _Marked(NOT_JSON_NUMBER.format(literal=literal))


def _marked_fields(value):
    """``{key: [message]}`` (nested like marshmallow's messages) of the marked
    numbers in ``value``; a marked top-level value is ``_schema``'s."""
    if isinstance(value, _Marked):
        return {"_schema": [value.message]}
    items = (value.items() if isinstance(value, dict)
             else enumerate(value) if isinstance(value, list) else ())
    found = {}
    for key, item in items:
        if isinstance(item, _Marked):
            found[str(key)] = [item.message]
        elif isinstance(item, (dict, list)):
            inner = _marked_fields(item)
            if inner:
                found[str(key)] = inner
    return found


_FIRST_READ = json.JSONDecoder(parse_float=_parse_float, parse_int=_parse_int,
                               parse_constant=_refuse_constant)
_MARKING_READ = json.JSONDecoder(parse_float=_mark_float, parse_int=_parse_int,
                                 parse_constant=_mark_constant)
"""The two reads' decoders, made once (``json.loads`` given hooks makes one per call)."""


def _decode(decoder, text):
    """``json.loads(text, ...)`` with ``decoder``'s hooks: a BOM refused as it refuses it."""
    if text.startswith("\ufeff"):
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    return decoder.decode(text)


def loads(text):
    """The body ``text`` as Python values; a 400 naming the field of a number
    that cannot be read, or for nesting too deep. Malformed JSON raises
    ``json.JSONDecodeError`` (webargs answers it)."""
    try:
        try:
            return _decode(_FIRST_READ, text)
        except _Unreadable:
            marked = _decode(_MARKING_READ, text)
            refused = _marked_fields(marked)
    except RecursionError:
        abort(400, messages={"json": ["The JSON body is nested too deeply."]})
    abort(400, messages={"json": refused})
