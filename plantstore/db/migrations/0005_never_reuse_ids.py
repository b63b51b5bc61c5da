"""Ids the database assigns are never reused, on SQLite too (AUTOINCREMENT).

Without ``AUTOINCREMENT`` SQLite gives a new row the largest id plus one, so
a subscription (or delivery, token, ...) added right after the newest one
was removed got the removed one's id, and an operator's ``webhooks remove
3`` typed twice could remove another receiver. PostgreSQL's sequences never
go back: there this migration does nothing.

SQLite cannot add ``AUTOINCREMENT`` to a column, so each table is rebuilt
following SQLite's documented procedure ("Making Other Kinds Of Table Schema
Changes", https://www.sqlite.org/lang_altertable.html#otheralter): from its
own ``CREATE TABLE`` statement in ``sqlite_master``, so it keeps whatever
columns earlier migrations gave it, with its indexes and triggers recreated.
peewee's runner turns foreign keys off before it opens the migration's
transaction (``SqliteMigrator.migration_context``), which the procedure
needs: dropping ``user`` with them on would cascade to every token and
plant. They are checked before the transaction commits.

Ids removed before this migration ran, above the largest id left, can still
come back once; every id handed out after it is new.
"""
import re

from playhouse.migrate import SqliteMigrator

TABLES = ("user", "token", "subscription", "delivery", "attempt")
"""The tables whose ids the database assigns (a plant's id is the client's)."""


def up(migrator, db):
    if isinstance(migrator, SqliteMigrator):
        _rebuild_all(db, _add_autoincrement)


def down(migrator, db):
    if isinstance(migrator, SqliteMigrator):
        _rebuild_all(db, _drop_autoincrement)


def _rebuild_all(db, edit):
    """Rebuild every table of ``TABLES`` with its id column's definition edited."""
    if db.execute_sql("PRAGMA foreign_keys").fetchone()[0]:
        raise RuntimeError("foreign keys must be off while tables are rebuilt")
    for table in TABLES:
        _rebuild(db, table, edit)
    problems = db.execute_sql("PRAGMA foreign_key_check").fetchall()
    if problems:
        raise RuntimeError(f"foreign key check failed after the rebuild: {problems[:5]}")


def _id_column(db, table):
    """The name of ``table``'s INTEGER PRIMARY KEY column (its rowid)."""
    keys = [row for row in db.execute_sql(f'PRAGMA table_info("{table}")') if row[5]]
    if len(keys) != 1 or keys[0][2].upper() != "INTEGER":
        raise RuntimeError(f"table {table!r} has no INTEGER PRIMARY KEY")
    return keys[0][1]


def _add_autoincrement(definition):
    return definition if re.search(r"\bAUTOINCREMENT\b", definition, re.I) \
        else definition + " AUTOINCREMENT"


def _drop_autoincrement(definition):
    return re.sub(r"\s+AUTOINCREMENT\b", "", definition, flags=re.I)


def _rebuild(db, table, edit):
    """SQLite's 12-step table rebuild, with ``edit`` applied to the id column."""
    create = db.execute_sql("SELECT sql FROM sqlite_master WHERE type = 'table' "
                            "AND name = ?", (table,)).fetchone()[0]
    column = _id_column(db, table)
    key = re.compile(rf'("?{re.escape(column)}"?\s+INTEGER\b[^,()]*?\bPRIMARY\s+KEY'
                     rf'(\s+AUTOINCREMENT)?)', re.I)
    matches = key.findall(create)
    if len(matches) != 1:
        raise RuntimeError(f"cannot find the id column's definition in {create!r}")
    edited = key.sub(lambda match: edit(match.group(1)), create)
    if edited == create:
        return
    rebuilt = f"{table}__rebuilt"
    head = re.compile(rf'^CREATE\s+TABLE\s+(IF\s+NOT\s+EXISTS\s+)?"?{re.escape(table)}"?',
                      re.I)
    new_table = head.sub(f'CREATE TABLE "{rebuilt}"', edited, count=1)
    companions = [row[0] for row in db.execute_sql(
        "SELECT sql FROM sqlite_master WHERE tbl_name = ? AND type IN ('index', 'trigger') "
        "AND sql IS NOT NULL", (table,))]
    columns = ", ".join(f'"{row[1]}"' for row in db.execute_sql(f'PRAGMA table_info("{table}")'))
    db.execute_sql(new_table)
    db.execute_sql(f'INSERT INTO "{rebuilt}" ({columns}) SELECT {columns} FROM "{table}"')
    db.execute_sql(f'DROP TABLE "{table}"')
    db.execute_sql(f'ALTER TABLE "{rebuilt}" RENAME TO "{table}"')
    for statement in companions:
        db.execute_sql(statement)
