"""The PL/pgSQL functions keep a version in their names (docs/scaling.md,
"Function versions"): each frozen file in ``migrations/functions/`` creates
the one function its name says, never replacing one a running release
calls, and the engine's named queries call only such versions."""
import os
import re

from plantstore.db import migrations, named_sql
from plantstore.webhooks.engine.store import postgres

FUNCTIONS_DIR = os.path.join(os.path.dirname(migrations.__file__), "functions")
VERSIONED = re.compile(r"^plantstore_[a-z0-9_]+_v[0-9]+$")


def frozen_functions():
    return {name[:-len(".sql")] for name in os.listdir(FUNCTIONS_DIR) if name.endswith(".sql")}


def test_each_frozen_file_creates_the_versioned_function_it_is_named_after():
    assert frozen_functions()
    for name in frozen_functions():
        assert VERSIONED.match(name), name
        with open(os.path.join(FUNCTIONS_DIR, f"{name}.sql"), encoding="utf-8") as file:
            text = file.read()
        assert re.findall(r"CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+(\w+)", text) == [name]
        assert "OR REPLACE" not in text.upper(), name


def test_the_engines_queries_call_only_versioned_functions_that_exist():
    called = set()
    for query in named_sql.load(postgres.QUERIES.path).values():
        called.update(re.findall(r"\b(plantstore_\w+)\s*\(", query))
    assert called
    assert called <= frozen_functions(), called - frozen_functions()
