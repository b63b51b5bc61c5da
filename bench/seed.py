"""Seed a throwaway plantstore database for the benchmark: one user, one
token, N plants owned by that user, written with raw multi-row inserts so a
million rows take seconds, not minutes."""
import subprocess
import sys

BENCH_USER = "bench"
BATCH = 50_000


def seed_plantstore(database_url, plants, first_id=0):
    """Migrate ``database_url``, add the bench user and ``plants`` plants; return a token.

    Runs in this process: the plantstore package is imported from the
    project's virtualenv.
    """
    from plantstore import create_app, db
    from plantstore.db.models import User, utcnow
    from plantstore.web.auth import issue_token

    app = create_app({"DATABASE_URL": database_url})
    with app.app_context():
        db.upgrade()
        with db.database.connection_context():
            with db.database.atomic():
                user, _ = User.get_or_create(name=BENCH_USER)
                _, secret = issue_token(user, prefix=app.config["TOKEN_PREFIX"])
            _insert_plants(db.database, user.id, plants, first_id, utcnow())
            # Planner statistics, as autovacuum would gather them in time
            # (it may be off on a test server).
            db.database.execute_sql("ANALYZE")
    db.database.close_all()
    return secret


def _insert_plants(database, owner_id, count, first_id, created_at):
    """Insert ``count`` plants with consecutive ids, in large batches
    (multi-row VALUES on PostgreSQL, where executemany is a round trip a row)."""
    columns = "INSERT INTO plant (id, owner_id, name, tag, created_at) VALUES "
    for start in range(first_id, first_id + count, BATCH):
        stop = min(start + BATCH, first_id + count)
        rows = [(i, owner_id, f"plant-{i}", "green", created_at)
                for i in range(start, stop)]
        with database.atomic():
            cursor = database.cursor()
            if database.param == "%s":
                from psycopg2.extras import execute_values
                execute_values(cursor, columns + "%s", rows, page_size=10_000)
            else:
                cursor.executemany(columns + "(?, ?, ?, ?, ?)", rows)


def seed_yardstick(ceiling_py, database_url, plants):
    """Seed a yardstick's database (sqlite:/// or postgresql://) with
    ``ceiling.py seed``; return its token."""
    out = subprocess.run([sys.executable, ceiling_py, "seed", str(plants)],
                         env={"CEILING_DATABASE_URL": database_url, "PATH": "/usr/bin:/bin"},
                         check=True, capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]
