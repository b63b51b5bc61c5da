"""Seed a throwaway plantstore database the size the portal must stay fast
on: USERS users, each with ENDPOINTS // USERS webhook subscriptions, and
DELIVERIES deliveries spread over every subscription in turn (as plants
created one after another by everybody), with their attempts.

Rows are made by the database itself in one statement per table
(``generate_series`` on PostgreSQL, a recursive CTE on SQLite), so a
million deliveries take seconds, and ANALYZE follows (autovacuum may be off).

Delivery ``n`` (1-based) belongs to subscription ``1 + (n - 1) % ENDPOINTS``,
which belongs to user ``1 + (s - 1) % USERS``; it was created at
``START + n * STEP_SECONDS``. Of each subscription's deliveries, one in
20 failed (three attempts), one in 100 is pending (no attempt), the others
were delivered (one attempt): which ones, by ``(n - 1) / ENDPOINTS +
(n - 1) % ENDPOINTS``, the delivery's round plus its subscription.
"""
import datetime

USERS = 1_000
ENDPOINTS = 10_000
DELIVERIES = 1_000_000
START = datetime.datetime(2025, 1, 1)
STEP_SECONDS = 2  # a million deliveries over 23 days
SECRET = "whsec_" + "A" * 43  # plain, as a test database stores it


def _mix(n, endpoints):
    """SQL of what sets delivery ``n``'s fate: its round plus its subscription."""
    return f"(({n} - 1) / {endpoints} + ({n} - 1) % {endpoints})"


def _columns(n, endpoints, at):
    """SQL of delivery ``n``'s status, attempts, last error, created and
    delivered times (``at`` is the SQL of its time)."""
    mix = _mix(n, endpoints)
    failed, pending = f"{mix} % 20 = 0", f"{mix} % 100 = 51"
    return (f"CASE WHEN {failed} THEN 'failed' WHEN {pending} THEN 'pending' "
            f"ELSE 'delivered' END, "
            f"CASE WHEN {failed} THEN 3 WHEN {pending} THEN 0 ELSE 1 END, "
            f"CASE WHEN {failed} THEN 'HTTP 500' END, {at}, "
            f"CASE WHEN NOT ({failed}) AND NOT ({pending}) THEN {at} END")


def _postgres_statements(users, endpoints, deliveries):
    start = f"timestamp '{START:%Y-%m-%d %H:%M:%S}'"
    at = f"{start} + g * interval '{STEP_SECONDS} seconds'"
    return [
        f"""INSERT INTO "user" (id, name, is_admin, created_at)
            SELECT g, 'owner-' || g, false, {start} FROM generate_series(1, {users}) g""",
        f"""INSERT INTO subscription (id, owner_id, url, secret, is_active, created_at,
                                      failure_streak)
            SELECT g, 1 + (g - 1) % {users}, 'https://receiver-' || g || '.example/hook',
                   '{SECRET}', true, {start}, 0
            FROM generate_series(1, {endpoints}) g""",
        f"""INSERT INTO delivery (id, subscription_id, message_id, event_type, payload,
                                  next_attempt_at, lease, status, attempts, last_error,
                                  created_at, delivered_at)
            SELECT g, 1 + (g - 1) % {endpoints}, 'msg_seed_' || g, 'plant.created',
                   '{{"id": ' || g || '}}', {at}, 0, {_columns("g", endpoints, at)}
            FROM generate_series(1, {deliveries}) g""",
        """INSERT INTO attempt (delivery_id, started_at, status_code, duration_ms,
                                 response_body)
            SELECT d.id, d.created_at + t * interval '1 second',
                   CASE WHEN d.status = 'failed' THEN 500 ELSE 200 END, 12,
                   CASE WHEN d.status = 'failed' THEN 'server error' ELSE 'ok' END
            FROM delivery d CROSS JOIN generate_series(1, 3) t
            WHERE t <= d.attempts ORDER BY d.id, t""",
        *(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
          f"(SELECT max(id) FROM {table}))"
          for table in ('"user"', "subscription", "delivery", "attempt")),
    ]


def _sqlite_statements(users, endpoints, deliveries):
    def numbers(count):
        return (f"WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g "
                f"WHERE n < {count}) ")
    start = f"'{START:%Y-%m-%d %H:%M:%S}'"
    at = f"datetime({start}, '+' || (n * {STEP_SECONDS}) || ' seconds')"
    return [
        numbers(users) + f"""INSERT INTO "user" (id, name, is_admin, created_at)
            SELECT n, 'owner-' || n, 0, {start} FROM g""",
        numbers(endpoints) + f"""INSERT INTO subscription (id, owner_id, url, secret,
                                  is_active, created_at, failure_streak)
            SELECT n, 1 + (n - 1) % {users}, 'https://receiver-' || n || '.example/hook',
                   '{SECRET}', 1, {start}, 0 FROM g""",
        numbers(deliveries) + f"""INSERT INTO delivery (id, subscription_id, message_id,
                                  event_type, payload, next_attempt_at, lease, status,
                                  attempts, last_error, created_at, delivered_at)
            SELECT n, 1 + (n - 1) % {endpoints}, 'msg_seed_' || n, 'plant.created',
                   '{{"id": ' || n || '}}', {at}, 0, {_columns("n", endpoints, at)}
            FROM g""",
        """WITH t(k) AS (VALUES (1), (2), (3))
           INSERT INTO attempt (delivery_id, started_at, status_code, duration_ms,
                                response_body)
           SELECT d.id, datetime(d.created_at, '+' || k || ' seconds'),
                  CASE WHEN d.status = 'failed' THEN 500 ELSE 200 END, 12,
                  CASE WHEN d.status = 'failed' THEN 'server error' ELSE 'ok' END
           FROM delivery d JOIN t ON t.k <= d.attempts ORDER BY d.id, t.k""",
    ]


def fill(database, users=USERS, endpoints=ENDPOINTS, deliveries=DELIVERIES):
    """Fill a migrated, empty peewee ``database`` as the module says, then ANALYZE."""
    postgres = database.param == "%s"
    statements = (_postgres_statements if postgres else _sqlite_statements)(
        users, endpoints, deliveries)
    if postgres:  # psycopg2 reads % as a parameter's mark
        statements = [statement.replace("%", "%%") for statement in statements]
    for statement in statements:
        with database.atomic():
            database.execute_sql(statement)
    database.execute_sql("ANALYZE")


def seed(database_url, users=USERS, endpoints=ENDPOINTS, deliveries=DELIVERIES):
    """Migrate ``database_url`` (empty) and fill it."""
    from plantstore import create_app, db

    app = create_app({"DATABASE_URL": database_url})
    with app.app_context():
        db.upgrade()
        with db.database.connection_context():
            fill(db.database, users, endpoints, deliveries)
    db.database.close_all()
