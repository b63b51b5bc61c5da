"""``python -m plantstore.db_probe URL``: exit 0 if the database answers, 1 if not.

Used by ``make test`` to decide whether the PostgreSQL suite can run.
"""
import sys

from .db import database_from_url


def main(url):
    """Try one query against ``url``; report why on stderr if it fails."""
    database = database_from_url(url)
    try:
        with database.connection_context():
            database.execute_sql("SELECT 1")
    except Exception as error:  # any driver error means "not reachable"
        print(f"{url}: {error}".strip(), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
