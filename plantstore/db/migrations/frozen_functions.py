"""What the numbered migrations share, itself no migration (the runner takes
only the files named ``[0-9]*.py``): the frozen text of a versioned PL/pgSQL
function. A migration imports it by its full name (``plantstore.db.migrations
.frozen_functions``): the runner loads a migration from its file, outside the
package, so a relative import would fail."""
import os

FUNCTIONS_DIR = os.path.join(os.path.dirname(__file__), "functions")


def function_text(name):
    """The frozen ``CREATE FUNCTION`` of a versioned function."""
    with open(os.path.join(FUNCTIONS_DIR, f"{name}.sql"), encoding="utf-8") as file:
        return file.read()
