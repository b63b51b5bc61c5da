"""The argument types the ``plantstore`` commands share.

Each refuses a bad value with a one-line usage error naming the argument
(exit status 2), before a command touches the database.
"""
import re

import click

from . import user_names

DIGITS = re.compile(r"[0-9]+")


class WholeNumber(click.ParamType):
    """A whole number from ``minimum`` to ``maximum`` in ASCII digits; a
    usage error saying what is expected, with ``example``, otherwise."""
    name = "integer"

    def __init__(self, minimum, maximum, example, what="a whole number"):
        self.minimum, self.maximum = minimum, maximum
        self.expected = f"{what} from {minimum} to {maximum}, e.g. {example}"

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            text = str(value).strip()
            # int() is never given more digits than the largest value has.
            if not DIGITS.fullmatch(text) or len(text) > len(str(self.maximum)):
                self.fail(f"expected {self.expected}, not {value!r}", param, ctx)
            number = int(text)
        if not self.minimum <= number <= self.maximum:
            self.fail(f"expected {self.expected}, not {value!r}", param, ctx)
        return number


ROW_ID = WholeNumber(1, 2 ** 31 - 1, 12, "an id")
"""A token's or a subscription's id, as the CLI accepts one (32-bit
integers on PostgreSQL: a larger one names no row)."""

DELIVERY_ID = WholeNumber(1, 2 ** 63 - 1, 12, "an id")
"""A delivery's id: 64-bit since migration 0013, like SQLite's rowids."""

LIST_LIMIT = WholeNumber(1, 100_000, 100)
"""How many rows a listing command shows at most."""


def days(most):
    """A number of days from 1 to ``most``."""
    return WholeNumber(1, most, 30, "a number of days")


class UserName(click.ParamType):
    """A user's name, put in its one form by ``user_names.enforce`` (PRECIS
    ``UsernameCasePreserved``, NFC, one script); a usage error saying why not.

    With ``existing``, a name that fails the rules is still taken as typed
    if it is printable and not all spaces, so that users named before the
    rules can be found.
    """
    name = "name"

    def __init__(self, existing=False):
        self.existing = existing

    def convert(self, value, param, ctx):
        try:
            return user_names.enforce(value)
        except user_names.InvalidUserName as error:
            if self.existing and value.strip() and value.isprintable() \
                    and len(value) <= user_names.MAX_LENGTH:
                return value
            self.fail(str(error), param, ctx)


NEW_USER_NAME = UserName()
"""The name of a user about to be created."""

USER_NAME = UserName(existing=True)
"""The name of a user who exists."""
