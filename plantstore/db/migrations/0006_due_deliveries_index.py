"""The index a worker's claim reads: pending deliveries in the order they
are due, ``(next_attempt_at, id) WHERE status = 'pending'``.

It replaces ``(status, next_attempt_at)``, whose rows were not in the
claim's order (ties on ``next_attempt_at`` go by id): PostgreSQL read every
pending row and sorted them on each claim, 5.5 ms for a backlog of 15,000,
against 0.08 ms through this index, which also leaves out the delivered and
failed rows that make up most of the table.
"""

NEW = ("CREATE INDEX delivery_due ON delivery (next_attempt_at, id) "
       "WHERE status = 'pending'")
OLD = "CREATE INDEX delivery_status_next_attempt_at ON delivery (status, next_attempt_at)"


def up(migrator, db):
    db.execute_sql(NEW)
    db.execute_sql("DROP INDEX delivery_status_next_attempt_at")


def down(migrator, db):
    db.execute_sql(OLD)
    db.execute_sql("DROP INDEX delivery_due")
