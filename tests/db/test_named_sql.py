"""The one SQL loader (``db.named_sql``): named statements of a ``.sql``
file, ``:name`` parameters and ``{now}`` compiled for the bound database's
driver, rows as dicts."""
import pytest

from plantstore import db
from plantstore.db import named_sql
from plantstore.db.models import Plant, User

STATEMENTS = """\
-- A file's own comment.

-- name: plant_named
-- The plant of :id (a parameter in a comment is the driver's too).
SELECT id, name, tag, {now} AS now FROM plant WHERE id = :id AND name LIKE '%' || :part

-- name: casts
SELECT :ids::int[] AS ids, '10:30'::time AS at
"""


@pytest.fixture
def queries(tmp_path):
    path = tmp_path / "statements.sql"
    path.write_text(STATEMENTS)
    return named_sql.Queries(path)


def test_a_file_is_its_named_statements_as_written():
    assert named_sql.parse(STATEMENTS) == {
        "plant_named": "-- The plant of :id (a parameter in a comment is the driver's too).\n"
                       "SELECT id, name, tag, {now} AS now FROM plant"
                       " WHERE id = :id AND name LIKE '%' || :part",
        "casts": "SELECT :ids::int[] AS ids, '10:30'::time AS at"}


def test_a_name_given_twice_is_refused():
    with pytest.raises(ValueError, match="'twice' is defined twice"):
        named_sql.parse("-- name: twice\nSELECT 1\n-- name: twice\nSELECT 2\n")


def test_postgresql_takes_pyformat_parameters_its_casts_and_percent_kept():
    assert named_sql.compiled(named_sql.parse(STATEMENTS)["casts"], "postgresql") \
        == "SELECT %(ids)s::int[] AS ids, '10:30'::time AS at"
    assert named_sql.compiled("SELECT {now} WHERE a LIKE '%' || :part", "postgresql") \
        == f"SELECT {db.DATABASE_NOW['postgresql']} WHERE a LIKE '%%' || %(part)s"


def test_sqlite_takes_the_text_as_written_with_its_clock():
    assert named_sql.compiled("SELECT {now} WHERE a LIKE '%' || :part", "sqlite") \
        == f"SELECT {db.DATABASE_NOW['sqlite']} WHERE a LIKE '%' || :part"


def test_a_statement_runs_on_the_bound_database_with_rows_as_dicts(app, queries):
    with app.app_context():
        with db.database.atomic():
            Plant.create(id=7, owner=User.create(name="carol"), name="Fern", tag="green")
        rows = queries.rows("plant_named", {"id": 7, "part": "ern"})
        none = queries.rows("plant_named", {"id": 7, "part": "moss"})
    assert [{key: row[key] for key in ("id", "name", "tag")} for row in rows] \
        == [{"id": 7, "name": "Fern", "tag": "green"}]
    assert rows[0]["now"] is not None
    assert none == []


PARTS = """\
-- part: fresh
-- A plant named lately (its comment is the file's, not the statement's).
p.created_at >= {now} - :days
AND p.name <> ''

-- name: fresh_plants
SELECT p.id FROM plant p WHERE {fresh} AND p.owner_id = :owner

-- name: fresh_count
SELECT count(*) FROM plant p WHERE p.tag = :tag AND {fresh}
"""


def test_a_part_is_written_once_and_included_by_each_statement_in_parentheses():
    fresh = "(p.created_at >= {now} - :days\nAND p.name <> '')"
    assert named_sql.parse(PARTS) == {
        "fresh_plants": f"SELECT p.id FROM plant p WHERE {fresh} AND p.owner_id = :owner",
        "fresh_count": f"SELECT count(*) FROM plant p WHERE p.tag = :tag AND {fresh}"}
    assert named_sql.compiled(named_sql.parse(PARTS)["fresh_plants"], "sqlite") \
        == (f"SELECT p.id FROM plant p WHERE (p.created_at >= {db.DATABASE_NOW['sqlite']}"
            " - :days\nAND p.name <> '') AND p.owner_id = :owner")


@pytest.mark.parametrize("text, refusal", [
    ("-- part: p\nTRUE\n-- name: q\nSELECT {p}\n-- part: p\nFALSE\n",
     "'p' is defined twice"),
    ("-- part: p\nTRUE\n-- name: p\nSELECT {p}\n", "'p' is defined twice"),
    ("-- name: q\nSELECT 1 WHERE {missing}\n", "part 'missing' is included but not defined"),
    ("-- part: p\nTRUE\n-- name: q\nSELECT 1\n", "part 'p' is included by no statement"),
    ("-- part: p\nTRUE\n-- part: r\n{p} AND FALSE\n-- name: q\nSELECT {r}\n",
     "part 'r' includes another part"),
    ("-- part: p\n-- only a comment\n-- name: q\nSELECT {p}\n", "part 'p' is empty"),
])
def test_a_part_defined_twice_missing_unused_nested_or_empty_is_refused(text, refusal):
    with pytest.raises(ValueError, match=refusal):
        named_sql.parse(text)

