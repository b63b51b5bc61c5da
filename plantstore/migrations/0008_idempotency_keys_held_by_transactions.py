"""Idempotency keys are held by the transaction of their request: the
``locked_until`` column of ``idempotency_key`` goes.

A request's claim on a key is its row, inserted in the request's own
transaction (and on PostgreSQL a transaction-level advisory lock), which
the database releases when that transaction ends or its connection drops;
a time in a column outlived a killed process. A row that such a time left
without an answer (its request died) is taken over by the key's next use,
like an expired one.
"""
from peewee import DateTimeField
from playhouse.migrate import migrate

TABLE = "idempotency_key"
COLUMN = "locked_until"


def up(migrator, db):
    migrate(migrator.drop_column(TABLE, COLUMN))


def down(migrator, db):
    migrate(migrator.add_column(TABLE, COLUMN, DateTimeField(null=True)))
