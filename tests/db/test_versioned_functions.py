"""The PL/pgSQL functions keep a version in their names (docs/scaling.md,
"Function versions"): each frozen file in ``migrations/functions/`` creates
the one function its name says, never replacing one a running release
calls, and the engine's named queries call only such versions."""
import os
import re

from plantstore.db import MIGRATIONS_DIR, faults, migrations, named_sql
from plantstore.db.migrations.frozen_functions import function_text
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


def test_the_migrations_helper_is_no_migration_and_the_migrations_share_it():
    """``migrations/frozen_functions.py`` is imported by the numbered
    migrations that create functions; the runner and the schema's check list
    only the numbered files (playhouse's ``Migration.load_directory``), so it
    is never applied or missed."""
    known = faults.known_migrations()
    assert "frozen_functions" not in known
    assert all(name[:4].isdigit() for name in known), known
    numbered = sorted(name for name in os.listdir(MIGRATIONS_DIR) if name[:4].isdigit())
    assert len(known) == len(numbered)
    copies = [name for name in numbered if "def function_text" in
              open(os.path.join(MIGRATIONS_DIR, name), encoding="utf-8").read()]
    assert not copies, copies
    for name in ("0010_engine_v2_functions.py", "0011_receiver_throttle.py",
                 "0014_job_rows.py", "0015_job_event_type.py", "0018_due_rule.py"):
        text = open(os.path.join(MIGRATIONS_DIR, name), encoding="utf-8").read()
        assert "from plantstore.db.migrations.frozen_functions import function_text" in text
    assert function_text("plantstore_claim_v3").startswith("--")
