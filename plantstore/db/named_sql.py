"""Named SQL statements kept in ``.sql`` files, as River and procrastinate keep
theirs: the one way plantstore runs SQL text (CRUD is peewee).

A file holds blocks, each opened by a line ``-- name: <name>``; the block's
text, up to the next such line, is the statement (comments kept, surrounding
blank lines trimmed). A block opened by ``-- part: <name>`` is no statement
but a condition several of the file's statements share, written once (the
delivery stores' due rule): a statement includes it as ``{<name>}``, which
becomes the part's text (its leading comment lines left out) in
parentheses when the file is read, so each statement is whole as
``Queries`` hands it out. A part includes no other part; one that no
statement includes, or a ``{<name>}`` that no part defines, is an error.
A parameter is written ``:name`` and passed in a dict;
``{now}`` stands for the database's current time as timestamps are stored
(naive UTC, see ``clock``). A statement is compiled once per backend, for its
driver: ``:name`` becomes ``%(name)s`` on PostgreSQL (psycopg2), and stays as
it is on SQLite (sqlite3). Rows come back as dicts keyed by column name
(``rows``), never by position.
"""
import re

from . import DATABASE_NOW, database, is_sqlite

NAME_LINE = re.compile(r"^--\s*(name|part):\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
"""The line that opens a block: a statement's (``name``) or a part's."""

INCLUDE = re.compile(r"\{([a-z_][a-z0-9_]*)\}")
"""Where a statement includes a part: ``{name}`` (``{now}`` is the clock's)."""

PARAMETER = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
"""``:name``, but not a PostgreSQL cast's ``::type``."""


def parse(text):
    """The statements of a file's ``text``, the parts they include filled in:
    {name: SQL}. A name given twice is an error, as is a part included by
    none, including another, or included but not defined."""
    blocks = NAME_LINE.split(text)
    statements, parts = {}, {}
    for kind, name, body in zip(blocks[1::3], blocks[2::3], blocks[3::3]):
        if name in statements or name in parts:
            raise ValueError(f"query {name!r} is defined twice")
        if kind == "part":
            parts[name] = _condition(name, body)
        else:
            statements[name] = body.strip()
    included = set()

    def include(match):
        name = match.group(1)
        if name == "now":
            return match.group(0)
        if name not in parts:
            raise ValueError(f"part {name!r} is included but not defined")
        included.add(name)
        return parts[name]

    statements = {name: INCLUDE.sub(include, body) for name, body in statements.items()}
    unused = sorted(set(parts) - included)
    if unused:
        raise ValueError(f"part {unused[0]!r} is included by no statement")
    return statements


def _condition(name, body):
    """A part's text as a statement includes it: in parentheses, without the
    comment lines that open it."""
    lines = body.strip().splitlines()
    while lines and lines[0].lstrip().startswith("--"):
        lines.pop(0)
    text = "\n".join(lines).strip()
    if not text:
        raise ValueError(f"part {name!r} is empty")
    if any(found != "now" for found in INCLUDE.findall(text)):
        raise ValueError(f"part {name!r} includes another part")
    return f"({text})"


def load(path):
    """The statements of the ``.sql`` file at ``path`` (``parse``)."""
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
