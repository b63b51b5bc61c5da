"""64-bit ids: deliveries, attempts and idempotency keys carry on past
2**31 (migration 0013 on PostgreSQL; SQLite's INTEGER ids are 64-bit), and
every place such an id is typed takes it (the deliveries page's cursor,
``plantstore deliveries show`` and ``retry``); a replayed
``Idempotency-Key`` consumes no id, ids running out answer 503 rather than
500, and ``plantstore db upgrade --expand`` stops before the migration that
needs every node on this release."""
import pytest

from helpers import (
    POSTGRES_URL,
    assert_error,
    bearer,
    create_plant,
    roll_back_after,
    wait_until,
    walk_pages,
)
from plantstore.db import database
from plantstore.db.models import Attempt, Delivery, IdempotencyKey
from plugins.webhooks import Answer, subscribe

JUST_BELOW = 2**31 - 3
SEQUENCES = {"delivery": "delivery_id_seq", "attempt": "attempt_id_seq",
             "idempotency_key": "idempotency_key_id_seq"}


def set_next_ids(start):
    """The next id of each 64-bit table: ``start + 1``."""
    for table, sequence in SEQUENCES.items():
        if POSTGRES_URL:
            database.execute_sql("SELECT setval(%s, %s)", (sequence, start))
        elif table == "idempotency_key":  # no AUTOINCREMENT: the largest id plus one
            database.execute_sql(
                "INSERT INTO idempotency_key (id, user_id, key, fingerprint, created_at, "
                "expires_at) VALUES (?, 1, 'placeholder', 'x', '2000-01-01', '2000-01-01')",
                (start,))
        else:
            database.execute_sql("UPDATE sqlite_sequence SET seq = ? WHERE name = ?",
                                 (start, table))


def keyed(token, key):
    return {**bearer(token), "Idempotency-Key": key}


def test_creates_keyed_creates_and_attempts_carry_on_past_two_to_the_31(
        app, client, runner, alice, make_receiver):
    receiver = make_receiver(Answer(200))
    subscribe(runner, receiver.url)
    set_next_ids(JUST_BELOW)

    for plant_id in range(5):
        assert client.post("/plants", json={"id": plant_id, "name": "fern"},
                           headers=bearer(alice)).status_code == 200
        assert client.post("/plants", json={"id": 100 + plant_id, "name": "fern"},
                           headers=keyed(alice, f"key-{plant_id}")).status_code == 200
    wait_until(lambda: Attempt.select().count() == 10, 30, message="10 attempts")

    assert max(d.id for d in Delivery.select()) > 2**31
    assert max(a.id for a in Attempt.select()) > 2**31
    assert max(k.id for k in IdempotencyKey.select()) > 2**31
    assert {d.status for d in Delivery.select()} == {Delivery.DELIVERED}
    assert len(receiver.requests) == 10


def test_delivery_ids_past_two_to_the_31_are_taken_by_the_page_cursor_and_the_commands(
        app, client, runner, alice, admin, make_receiver):
    receiver = make_receiver(Answer(200))
    subscription_id, _ = subscribe(runner, receiver.url)
    set_next_ids(JUST_BELOW)
    for plant_id in range(5):
        create_plant(client, alice, plant_id)
    wait_until(lambda: Delivery.select().where(Delivery.status == Delivery.DELIVERED)
               .count() == 5, 30, message="5 deliveries")
    ids = sorted((d.id for d in Delivery.select()), reverse=True)
    assert ids[0] > 2**31 and ids[-1] < 2**31 - 1, ids

    pages = walk_pages(client, f"/webhooks/{subscription_id}/deliveries?limit=1", bearer(admin))
    assert [delivery["id"] for page in pages for delivery in page] == ids

    shown = runner.invoke(args=["deliveries", "show", str(ids[0])])
    assert shown.exit_code == 0, shown.output
    assert f"delivery:     {ids[0]}" in shown.stdout
    retried = runner.invoke(args=["deliveries", "retry", str(ids[0])])
    assert (retried.exit_code, retried.stderr.split(" was ")[0]) == (1, f"Error: delivery {ids[0]}")
    too_big = runner.invoke(args=["deliveries", "show", str(2**63)])
    assert too_big.exit_code == 2
    assert "expected an id from 1 to 9223372036854775807" in too_big.stderr
    assert_error(client.get(f"/webhooks/{subscription_id}/deliveries?after={2**63}",
                            headers=bearer(admin)), 400)


def test_a_replayed_idempotency_key_consumes_no_id(app, client, alice):
    first = client.post("/plants", json={"id": 1, "name": "fern"}, headers=keyed(alice, "k1"))
    for _ in range(3):
        replay = client.post("/plants", json={"id": 1, "name": "fern"},
                             headers=keyed(alice, "k1"))
        assert replay.headers["Idempotent-Replayed"] == "true"
        assert replay.get_data() == first.get_data()
    client.post("/plants", json={"id": 2, "name": "fern"}, headers=keyed(alice, "k2"))

    ids = [k.id for k in IdempotencyKey.select().order_by(IdempotencyKey.id)]
    assert ids[1] == ids[0] + 1, ids


@pytest.mark.skipif(not POSTGRES_URL, reason="PostgreSQL's sequences have a last value; "
                                             "SQLite's 64-bit rowids do not run out here")
def test_ids_running_out_answer_503_never_500(app, client, runner, alice):
    subscribe(runner, "http://127.0.0.1:9/hook")
    database.execute_sql("ALTER SEQUENCE delivery_id_seq MAXVALUE 10")
    try:
        database.execute_sql("SELECT setval('delivery_id_seq', 10)")
        response = client.post("/plants", json={"id": 1, "name": "fern"},
                               headers=bearer(alice))
        assert_error(response, 503)
    finally:
        database.execute_sql("ALTER SEQUENCE delivery_id_seq NO MAXVALUE")


AFTER_0012 = ("0013_bigint_ids", "0014_job_rows", "0015_job_event_type", "0016_portal",
               "0017_delivery_log_index", "0018_due_rule")
LEFT = (f"left for after the rollout: {', '.join(AFTER_0012)} (run `plantstore db upgrade` "
        "once every node runs this release)")


def test_upgrade_expand_stops_before_the_migration_that_needs_every_node(app, runner):
    with database.connection_context():
        roll_back_after("0009_create_functions")
    try:
        result = runner.invoke(args=["db", "upgrade", "--expand"])
        assert result.exit_code == 0, result.output
        assert result.stdout.splitlines() == ["applied 0010_engine_v2_functions",
                                              "applied 0011_receiver_throttle",
                                              "applied 0012_wider_secrets", LEFT]
        if POSTGRES_URL:  # the release before's functions run beside the new ones
            assert _id_type() == "integer"
            for function in ("plantstore_claim", "plantstore_claim_v2"):
                assert _exists(function)
        assert runner.invoke(args=["db", "upgrade", "--expand"]).stdout.splitlines() == [LEFT]
    finally:
        result = runner.invoke(args=["db", "upgrade"])
    assert result.exit_code == 0, result.output
    assert result.output.split() == [word for name in AFTER_0012 for word in ("applied", name)]
    if POSTGRES_URL:
        assert _id_type() == "bigint"


def _id_type():
    return database.execute_sql(
        "SELECT data_type FROM information_schema.columns "
        "WHERE table_name = 'delivery' AND column_name = 'id'").fetchone()[0]


def _exists(function):
    return database.execute_sql("SELECT count(*) FROM pg_proc WHERE proname = %s",
                                (function,)).fetchone()[0] == 1
