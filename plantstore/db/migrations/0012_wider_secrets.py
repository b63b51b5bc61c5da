"""Room for encrypted signing secrets: ``subscription.secret`` loses its
100-character cap.

A ``whsec_`` secret (50 characters) encrypted at rest (see
``plantstore/encryption.py``) takes about 170. On PostgreSQL the column
becomes ``varchar`` without a length: a change of the catalog alone (no
table rewrite, no long lock), and still the ``varchar`` that the queue's
functions return. SQLite enforces no declared length: nothing to do there.
The release before reads and writes the wider column as it did.

Frozen like 0001.
"""
from playhouse.migrate import SqliteMigrator


def up(migrator, db):
    if not isinstance(migrator, SqliteMigrator):
        db.execute_sql("ALTER TABLE subscription ALTER COLUMN secret TYPE varchar")


def down(migrator, db):
    # Refused by PostgreSQL while an encrypted secret (over 100 characters) is stored.
    if not isinstance(migrator, SqliteMigrator):
        db.execute_sql("ALTER TABLE subscription ALTER COLUMN secret TYPE varchar(100)")
