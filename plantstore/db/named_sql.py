"""Named SQL statements kept in ``.sql`` files, as River and procrastinate keep
theirs: the one way plantstore runs SQL text (CRUD is peewee).

A file holds blocks, each opened by a line ``-- name: <name>``; the block's
text, up to the next such line, is the statement (comments kept, surrounding
blank lines trimmed). A parameter is written ``:name`` and passed in a dict;
``{now}`` stands for the database's current time as timestamps are stored
(naive UTC, see ``clock``). A statement is compiled once per backend, for its
driver: ``:name`` becomes ``%(name)s`` on PostgreSQL (psycopg2), and stays as
it is on SQLite (sqlite3). Rows come back as dicts keyed by column name
(``rows``), never by position.
"""
import re

from . import DATABASE_NOW, database, is_sqlite

NAME_LINE = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)

PARAMETER = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
"""``:name``, but not a PostgreSQL cast's ``::type``."""


def parse(text):
    """The statements of a file's ``text``: {name: SQL}. A name given twice is an error."""
    parts = NAME_LINE.split(text)
    statements = {}
    for name, body in zip(parts[1::2], parts[2::2]):
        if name in statements:
            raise ValueError(f"query {name!r} is defined twice")
        statements[name] = body.strip()
    return statements


def load(path):
    """The statements of the ``.sql`` file at ``path``, as written."""
    with open(path, encoding="utf-8") as file:
        return parse(file.read())


def compiled(text, dialect):
    """``text`` as the driver of ``dialect`` ("sqlite" or "postgresql") takes it."""
    text = text.replace("{now}", DATABASE_NOW[dialect])
    if dialect == "sqlite":
        return text
    return PARAMETER.sub(r"%(\1)s", text.replace("%", "%%"))


def dict_rows(cursor):
    """A cursor's rows as dicts keyed by column name."""
    names = [column[0] for column in cursor.description or ()]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


class Queries:
    """The named statements of one ``.sql`` file, run on the bound database."""

    def __init__(self, path):
        self.path = path
        self._written = load(path)
        self._by_dialect = {}

    def __getitem__(self, name):
        """Statement ``name`` as the bound database's driver takes it."""
        dialect = "sqlite" if is_sqlite() else "postgresql"
        statements = self._by_dialect.get(dialect)
        if statements is None:
            statements = self._by_dialect[dialect] = {
                key: compiled(text, dialect) for key, text in self._written.items()}
        return statements[name]

    def execute(self, name, params=()):
        """Run statement ``name`` with ``params`` (a dict); the driver's cursor."""
        return database.execute_sql(self[name], params)

    def rows(self, name, params=()):
        """Run statement ``name`` with ``params`` (a dict); its rows as dicts."""
        return dict_rows(self.execute(name, params))
