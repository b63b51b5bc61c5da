"""Named SQL queries kept in ``.sql`` files, as River and procrastinate keep theirs.

A file holds blocks, each opened by a line ``-- name: <name>``; the block's
text, up to the next such line, is the query (comments kept, surrounding
blank lines trimmed). Parameters are written in the driver's own style
(``%(name)s`` for psycopg2, ``:name`` for sqlite3) and passed as a dict.
Rows come back as dicts keyed by column name (``rows``), never by position.
"""
import re

from . import database

NAME_LINE = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def parse(text):
    """The queries of a file's ``text``: {name: SQL}. A name given twice is an error."""
    parts = NAME_LINE.split(text)
    queries = {}
    for name, body in zip(parts[1::2], parts[2::2]):
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        queries[name] = body.strip()
    return queries


def load(path):
    """The queries of the ``.sql`` file at ``path``."""
    with open(path, encoding="utf-8") as file:
        return parse(file.read())


def dict_rows(cursor):
    """A cursor's rows as dicts keyed by column name."""
    names = [column[0] for column in cursor.description or ()]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


class Queries:
    """The named queries of one file, run on the bound database."""

    def __init__(self, path):
        self.path = path
        self._queries = load(path)

    def __getitem__(self, name):
        return self._queries[name]

    def execute(self, name, params=()):
        """Run query ``name`` with ``params``; the driver's cursor."""
        return database.execute_sql(self._queries[name], params)

    def rows(self, name, params=()):
        """Run query ``name`` with ``params``; its rows as dicts."""
        return dict_rows(self.execute(name, params))
