"""Row ids are never reused: those of removed subscriptions, deliveries and
tokens stay retired, on SQLite through the migration that rebuilds its
tables with AUTOINCREMENT (keeping every column, row, index and key)."""
import json

import pytest
from peewee import SqliteDatabase
from playhouse.migrations import Runner

from helpers import POSTGRES_URL, bearer
from plantstore import db
from plantstore.db.models import Delivery, Subscription, Token


def add_webhook(runner):
    result = runner.invoke(args=["webhooks", "add", "http://127.0.0.1:9/hook"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["id"]


def test_ids_of_removed_subscriptions_deliveries_and_tokens_are_never_reused(
        runner, client, make_token):
    first = add_webhook(runner)
    token = make_token("alice")
    assert client.post("/plants", json={"id": 1, "name": "fern"},
                       headers=bearer(token)).status_code == 200
    (delivery,) = [d.id for d in Delivery.select()]
    (token_id,) = [t.id for t in Token.select()]
    assert runner.invoke(args=["webhooks", "remove", str(first)]).exit_code == 0
    assert runner.invoke(args=["users", "delete", "alice"]).exit_code == 0

    second = add_webhook(runner)
    token = make_token("alice")
    assert client.post("/plants", json={"id": 2, "name": "fern"},
                       headers=bearer(token)).status_code == 200
    assert second > first
    assert [d.id for d in Delivery.select()] == [delivery + 1]
    assert [t.id for t in Token.select()] > [token_id]
    assert runner.invoke(args=["webhooks", "remove", str(first)]).exit_code != 0
    assert Subscription.get_by_id(second)


@pytest.mark.skipif(bool(POSTGRES_URL),
                    reason="the rebuild is SQLite's; PostgreSQL never reuses ids")
def test_the_sqlite_rebuild_keeps_columns_added_by_earlier_migrations_rows_and_keys(tmp_path):
    database = SqliteDatabase(str(tmp_path / "old.db"), pragmas={"foreign_keys": 1})
    db.database.initialize(database)
    runner = Runner(db.database, directory=db.MIGRATIONS_DIR)
    runner.up(target="0001_initial")
    sql = database.execute_sql
    sql('ALTER TABLE "subscription" ADD COLUMN "note" TEXT DEFAULT \'kept\'')
    sql('CREATE INDEX "subscription_note" ON "subscription" ("note")')
    sql('INSERT INTO "subscription" (url, secret, is_active, created_at) '
        "VALUES ('http://a/', 's', 1, '2026-01-01'), ('http://b/', 's', 1, '2026-01-01')")
    sql('INSERT INTO "delivery" (subscription_id, message_id, event_type, payload, status, '
        "attempts, next_attempt_at, created_at) VALUES (2, 'm', 'e', '{}', 'pending', 0, "
        "'2026-01-01', '2026-01-01')")
    sql('DELETE FROM "subscription" WHERE id = 1')

    runner.up()

    create = sql("SELECT sql FROM sqlite_master WHERE name = 'subscription'").fetchone()[0]
    assert "AUTOINCREMENT" in create and '"note" TEXT' in create
    assert sql("SELECT id, note FROM subscription").fetchall() == [(2, "kept")]
    assert sql("SELECT subscription_id FROM delivery").fetchall() == [(2,)]
    indexes = {row[0] for row in sql("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"subscription_note", "delivery_message_id", "user_name"} <= indexes
    assert sql("PRAGMA foreign_keys").fetchone()[0] == 1
    assert sql("PRAGMA foreign_key_check").fetchall() == []
    sql('DELETE FROM "subscription" WHERE id = 2')
    assert sql("SELECT count(*) FROM delivery").fetchone()[0] == 0  # cascades again
    sql('INSERT INTO "subscription" (url, secret, is_active, created_at) '
        "VALUES ('http://c/', 's', 1, '2026-01-01')")
    assert sql("SELECT id FROM subscription").fetchall() == [(3,)]
    database.close()
