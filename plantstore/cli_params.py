"""The argument types the ``plantstore`` commands share.

Each refuses a bad value with a one-line usage error naming the argument
(exit status 2), before a command touches the database.
"""
import click

ROW_ID = click.IntRange(1, 2 ** 31 - 1)
"""A stored row's id, as the CLI accepts one (ids are 32-bit integers on
PostgreSQL; a larger one names no row and would overflow SQLite's driver)."""

LIST_LIMIT = click.IntRange(1, 100_000)
"""How many rows a listing command shows at most."""


class UserName(click.ParamType):
    """A user's name: 1 to 100 printable characters, not all spaces."""
    name = "name"
    MAX_LENGTH = 100

    def convert(self, value, param, ctx):
        if not value.strip() or len(value) > self.MAX_LENGTH or not value.isprintable():
            self.fail(f"a user name is 1 to {self.MAX_LENGTH} characters, all printable "
                      "(no line breaks or control characters)", param, ctx)
        return value


USER_NAME = UserName()
