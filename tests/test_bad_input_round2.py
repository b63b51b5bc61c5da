"""Every bad input gets a clear answer, round 2 (issue 13).

Each class of input gets one answer, whoever sends it: HTTP bodies that are
truncated or malformed (through a real gunicorn, over raw sockets), query
and path integers written any other way than ASCII digits, OPTIONS answers,
hostile command arguments and settings, and ids that are never reused.
"""
import json
import socket
import time

import pytest
from peewee import SqliteDatabase
from playhouse.migrations import Runner

from helpers import POSTGRES_URL, assert_error, bearer, setting
from plantstore import db
from plantstore.models import Delivery, Plant, Subscription, Token, User
from plantstore.settings import SettingError


@pytest.fixture
def app_config():
    return {"WEBHOOK_CONNECT_TIMEOUT": 0.3, "WEBHOOK_READ_TIMEOUT": 0.6,
            "WEBHOOK_RETRY_SCHEDULE": "0"}


# -- HTTP bodies, through gunicorn -------------------------------------------

def exchange(port, request, half_close=True, seconds=10):
    """Send raw ``request`` bytes; the answer's status, headers and JSON body.

    With ``half_close`` the client then shuts its sending side, as a client
    that stopped sending mid-body would.
    """
    with socket.create_connection(("127.0.0.1", port), timeout=seconds) as sock:
        sock.sendall(request)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        answer = b""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            data = sock.recv(65536)
            if not data:
                break
            answer += data
            head, _, body = answer.partition(b"\r\n\r\n")
            length = [int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")]
            if length and len(body) >= length[0]:
                break
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, json.loads(body)


def post_head(token, *framing):
    return ("POST /plants HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            + "".join(f"{line}\r\n" for line in framing) + "\r\n").encode()


def assert_refused_as_client_error(server, status, headers, body):
    assert status == 400, body
    assert headers["Content-Type"] == "application/json"
    assert set(body) == {"error", "message"} and body["error"] == 400
    output = server.output()
    assert "unhandled error" not in output and "Traceback" not in output


CHUNK = b'{"id": 1, "name": "fern"}'
MALFORMED_CHUNKED = {
    "size is not hex": b"zz\r\n" + CHUNK + b"\r\n0\r\n\r\n",
    "chunk without its CRLF": b"%x\r\n" % len(CHUNK) + CHUNK + b"XX0\r\n\r\n",
    "bad chunk extension": b"%x;=\r\n" % len(CHUNK) + CHUNK + b"\r\n0\r\n\r\n",
    "size line without CRLF": b"%x\n" % len(CHUNK) + CHUNK + b"\r\n0\r\n\r\n",
    "ends mid-chunk": b"%x\r\n" % (len(CHUNK) + 10) + CHUNK,
    "no last chunk": b"%x\r\n" % len(CHUNK) + CHUNK + b"\r\n",
    "bare LF in trailers": b"%x\r\n" % len(CHUNK) + CHUNK + b"\r\n0\r\nX: y\nZ: 1\r\n\r\n",
}


@pytest.mark.slow
def test_malformed_chunked_framing_is_a_400_logged_as_a_client_error(
        gunicorn_server, make_token):
    server = gunicorn_server(workers=1)
    token = make_token()
    head = post_head(token, "Transfer-Encoding: chunked")
    for case, body in MALFORMED_CHUNKED.items():
        status, headers, answer = exchange(server.port, head + body)
        assert_refused_as_client_error(server, status, headers, answer), case
    assert "request body refused" in server.output()
    status, _, _ = exchange(server.port, head + b"%x\r\n" % len(CHUNK) + CHUNK
                            + b"\r\n0\r\n\r\n")
    assert status == 200
    assert Plant.select().count() == 1


@pytest.mark.slow
def test_a_body_shorter_than_its_content_length_is_a_400_and_creates_nothing(
        gunicorn_server, make_token):
    server = gunicorn_server(workers=1)
    token = make_token()
    body = b'{"id": 7, "name": "fern"}'
    status, headers, answer = exchange(
        server.port, post_head(token, "Content-Length: 500") + body)
    assert_refused_as_client_error(server, status, headers, answer)
    assert "500" in answer["message"] and str(len(body)) in answer["message"]
    assert Plant.select().count() == 0
    status, _, _ = exchange(
        server.port, post_head(token, f"Content-Length: {len(body)}") + body)
    assert status == 200


# -- query and path integers --------------------------------------------------

NOT_ASCII_INTEGERS = ["1_0", "+7", " 7", "7 ", "\u0667", "\uff11\uff10", "0x10",
                      "7.0", "1e1", "", "--7", "7-"]


@pytest.mark.parametrize("parameter", ["limit", "after"])
@pytest.mark.parametrize("written", NOT_ASCII_INTEGERS)
def test_query_integers_written_other_than_ascii_digits_are_400_naming_them(
        client, alice, parameter, written):
    response = client.get("/plants", query_string={parameter: written},
                          headers=bearer(alice))
    body = assert_error(response, 400)
    assert list(body["details"]) == [parameter]
    assert body["message"].startswith(f"Invalid {parameter}: ")


@pytest.mark.parametrize("written", ["1_0", "+7", " 7", "\u0667", "\uff11\uff10", "0x10",
                                     "7.5", "1e-1", "1.", ".5"])
def test_path_ids_written_other_than_json_integers_in_ascii_are_400(client, alice, written):
    response = client.delete(f"/plants/{written}", headers=bearer(alice))
    body = assert_error(response, 400)
    assert list(body["details"]) == ["id"]


def test_integers_of_thousands_of_digits_are_400_naming_the_bound(client, alice):
    huge = "9" * 5000
    body = assert_error(client.get(f"/plants?limit={huge}", headers=bearer(alice)), 400)
    assert "less than or equal to" in body["message"]
    body = assert_error(client.get(f"/plants?after=-{huge}", headers=bearer(alice)), 400)
    assert "greater than or equal to -9223372036854775808" in body["message"]
    assert_error(client.delete(f"/plants/{huge}", headers=bearer(alice)), 400)


def test_ascii_integers_still_page_and_delete(client, alice):
    for plant_id in (-3, 5, 9):
        client.post("/plants", json={"id": plant_id, "name": "fern"}, headers=bearer(alice))
    response = client.get("/plants?limit=01&after=-4", headers=bearer(alice))
    assert response.status_code == 200
    assert response.headers["Link"] == '</plants?limit=1&after=-3>; rel="next"'
    assert client.delete("/plants/-3", headers=bearer(alice)).status_code == 204
    # The create body may write an id as 5.0 or 9e0; the path takes it back so.
    assert client.delete("/plants/5.0", headers=bearer(alice)).status_code == 204
    assert client.delete("/plants/0.9e1", headers=bearer(alice)).status_code == 204


# -- OPTIONS --------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/plants", "/plants/1", "/healthz", "/openapi.json"])
def test_options_answers_are_empty_without_a_content_type(client, path):
    response = client.options(path)
    assert response.status_code == 200
    assert response.data == b""
    assert "Content-Type" not in response.headers
    assert "OPTIONS" in response.headers["Allow"]


# -- command arguments and settings ----------------------------------------------

def assert_usage_error(result, *fragments):
    """Exit status 2, one ``Error: ...`` sentence, no traceback."""
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("Error: ")
    for fragment in fragments:
        assert fragment in error, error


BEYOND = str(2 ** 63)


@pytest.mark.parametrize("args, named", [
    (["tokens", "revoke", BEYOND], "TOKEN_ID"),
    (["tokens", "revoke", "0"], "TOKEN_ID"),
    (["tokens", "create", "alice", "--expires-in", "99999999"], "--expires-in"),
    (["webhooks", "remove", BEYOND], "SUBSCRIPTION_ID"),
    (["webhooks", "rotate-secret", BEYOND], "SUBSCRIPTION_ID"),
    (["webhooks", "enable", "0"], "SUBSCRIPTION_ID"),
    (["deliveries", "show", BEYOND], "DELIVERY_ID"),
    (["deliveries", "retry", BEYOND], "DELIVERY_ID"),
    (["deliveries", "list", "--limit", BEYOND], "--limit"),
    (["users", "create", "ann\nbob"], "NAME"),
    (["users", "create", "x" * 101], "NAME"),
    (["users", "delete", "alice\n"], "NAME"),
    (["tokens", "create", "alice\r"], "NAME"),
    (["tokens", "list", "   "], "NAME"),
    (["webhooks", "add", "http://example.com/ x"], "URL"),
    (["webhooks", "add", " http://example.com/"], "URL"),
    (["webhooks", "add", "http://example.com/\n"], "URL"),
    (["webhooks", "add", "http://example.com/" + "a" * 2048], "URL"),
    (["webhooks", "add", "http://example.com/", "--bearer", "abc\r\nX-Evil: 1"], "--bearer"),
    (["webhooks", "add", "http://example.com/", "--bearer", "a b"], "--bearer"),
    (["webhooks", "add", "http://example.com/", "--bearer", "\u00e9t\u00e9"], "--bearer"),
])
def test_a_bad_command_argument_is_exit_2_naming_it_and_changes_nothing(
        runner, make_token, args, named):
    make_token("alice")
    result = runner.invoke(args=args)
    assert_usage_error(result, named)
    assert Subscription.select().count() == 0
    assert User.select().count() == 1 and Token.select().count() == 1


@pytest.mark.parametrize("key, value", [
    ("WEBHOOK_READ_TIMEOUT", "1e999"), ("WEBHOOK_READ_TIMEOUT", "1_0"),
    ("WEBHOOK_READ_TIMEOUT", "nan"), ("WORKER_POLL_INTERVAL", "\u0661"),
    ("WEBHOOK_RETRY_SCHEDULE", "inf"), ("WEBHOOK_RETRY_SCHEDULE", "5,1_0"),
    ("MAX_CONTENT_LENGTH", "-1"), ("MAX_CONTENT_LENGTH", "1_000"),
    ("DATABASE_URL", "sqlite:///" + "a" * 5000),
])
def test_an_unusable_setting_is_one_line_naming_it(key, value):
    with pytest.raises(SettingError) as refused:
        setting(key).read(value)
    message = str(refused.value)
    assert message.startswith(f"PLANTSTORE_{key} ") and "\n" not in message


# -- ids are never reused -------------------------------------------------------

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


@pytest.mark.skipif(bool(POSTGRES_URL), reason="the rebuild is SQLite's; PostgreSQL never reuses ids")
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
