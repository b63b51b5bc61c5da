"""The hot paths' shortcuts answer exactly what the slow, documented way would:
named SQL statements against the peewee queries they stand for, the plant
bodies of the list and the create against the marshmallow schema's dump, a
create without an Idempotency-Key against the header's schema,
SQLite's write turns against SQLite's own locking, and the access line
written directly against the one logging would write; and the request
schemas are made once, not per request."""
import dataclasses
import datetime
import io
import logging
import re
import subprocess
import sys
import threading
import time

import marshmallow as ma
import pytest
from flask import json
from gunicorn.config import Config as GunicornConfig
from hypothesis import given, settings
from hypothesis import strategies as st
from peewee import IntegrityError, OperationalError

from helpers import bearer, create_plant, seed, wait_until
from plantstore import db
from plantstore.db.models import Plant, Subscription, User, utcnow
from plantstore.observability.logs import REQUEST_ID_ENVIRON_KEY, JSONFormatter
from plantstore.plants import queries
from plantstore.plants.schemas import PlantSchema, plant_json
from plantstore.server.gunicorn import JSONAccessLogger, _plain_json_stream_handler
from plantstore.web.auth import find_caller, issue_token
from plantstore.webhooks import config as webhook_config
from plantstore.webhooks.engine import queue


def peewee_page(caller, after, limit):
    """The page ``queries.page`` must return, built the ordinary peewee way."""
    query = Plant.select(Plant.id, Plant.name, Plant.tag)
    if not caller.is_admin:
        query = query.where(Plant.owner == caller.user_id)
    if after is not None:
        query = query.where(Plant.id > after)
    return list(query.order_by(Plant.id).limit(limit).dicts())


@pytest.mark.parametrize("after", [None, -(2 ** 63), -5, 3, 10, 2 ** 63 - 1])
@pytest.mark.parametrize("limit", [1, 4, 50])
def test_compiled_list_pages_are_the_rows_the_peewee_query_reads(
        app, alice, bob, admin, after, limit):
    seed("alice", [-7, -5, 0, 3, 4, 9, 2 ** 62], tag="a")
    seed("bob", [-6, 1, 5, 10, 11])
    with app.app_context():
        callers = [find_caller(token) for token in (alice, bob, admin)]
        for caller in callers:
            assert queries.page(caller, after, limit) == peewee_page(caller, after, limit)


@pytest.mark.parametrize("expires_in, valid", [
    (datetime.timedelta(days=1), True),
    (datetime.timedelta(seconds=30), True),
    (datetime.timedelta(seconds=-1), False),
    (datetime.timedelta(days=-400), False),
])
def test_token_lookup_reads_the_stored_expiry_as_the_model_does(app, expires_in, valid):
    with app.app_context(), db.database.atomic():
        user = User.create(name="carol")
        row, secret = issue_token(user)
        row.expires_at = utcnow() + expires_in
        row.save()
    with app.app_context():
        caller = find_caller(secret)
    assert (caller is not None) == valid
    if valid:
        assert caller.user_id == user.id and not caller.is_admin


# Every name and tag a plant can be stored with: no NUL, no lone surrogate.
_stored_text = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"),
                       max_size=255)


@settings(max_examples=300, deadline=None)
@given(name=_stored_text.filter(bool), tag=st.none() | _stored_text)
def test_plant_json_is_byte_for_byte_the_schema_dump_of_a_stored_plant(name, tag):
    documented = json.dumps(PlantSchema().dump(Plant(id=1, owner=1, name=name, tag=tag)))
    assert json.dumps(plant_json(name, tag)) == documented


SHOWN_CASES = [("fern", None), ("fern", "green"), ("Фикус 🌿 ü", "日本語"),
               ('quo"te \\ </script>', "tab\tnew\nline"), ("fern", "")]


def test_list_response_is_byte_for_byte_the_schema_dump_of_the_stored_plants(
        app, client, alice):
    for plant_id, (name, tag) in enumerate(SHOWN_CASES):
        body = {"id": plant_id, "name": name, **({} if tag is None else {"tag": tag})}
        assert client.post("/plants", json=body, headers=bearer(alice)).status_code == 200
    response = client.get("/plants", headers=bearer(alice))
    with app.app_context():
        stored = list(Plant.select().order_by(Plant.id))
        documented = json.dumps(PlantSchema(many=True).dump(stored))
    assert response.data == documented.encode()


def test_created_plant_body_is_byte_for_byte_the_schema_dump(app, client, alice):
    for plant_id, (name, tag) in enumerate(SHOWN_CASES):
        body = {"id": plant_id, "name": name, **({} if tag is None else {"tag": tag})}
        response = client.post("/plants", json=body, headers=bearer(alice))
        assert response.status_code == 200
        with app.app_context():
            documented = json.dumps(PlantSchema().dump(Plant.get_by_id(plant_id)))
        assert response.data == documented.encode()


def test_a_request_makes_no_schema(client, alice, monkeypatch):
    """The schemas that load a request's arguments are made when the routes
    are declared: from a schema class webargs would make one per request."""
    made = []
    make = ma.Schema.__init__

    def counted(schema, *args, **kwargs):
        made.append(type(schema).__name__)
        make(schema, *args, **kwargs)
    monkeypatch.setattr(ma.Schema, "__init__", counted)
    create_plant(client, alice, 1)
    response = client.post("/plants", json={"id": 2, "name": "moss"},
                           headers={**bearer(alice), "Idempotency-Key": "k-2"})
    assert response.status_code == 200
    assert client.get("/plants?limit=10", headers=bearer(alice)).status_code == 200
    assert made == []


def test_a_stored_plants_jobs_are_what_a_claim_of_its_deliveries_reads(app, alice, bob):
    """The jobs a create builds from its own statements (SQL text on SQLite,
    one statement on PostgreSQL) hold what a claim reads back from the rows
    they wrote: the same delivery, its subscription's address, credentials
    and secrets; and only the active subscriptions that hear about it."""
    with app.app_context():
        alice_id, bob_id = (User.get(User.name == name).id for name in ("alice", "bob"))
        with db.database.atomic():
            Subscription.create(url="http://127.0.0.1:1/a", secret="whsec_a",
                                retired_secrets='[{"secret": "whsec_old", '
                                                '"expires_at": "2000-01-01T00:00:00"}]')
            Subscription.create(url="http://127.0.0.1:1/b", secret="whsec_b",
                                is_active=False, disabled_reason="410")
            Subscription.create(url="http://127.0.0.1:1/c", secret="whsec_c",
                                bearer_token="t", owner=alice_id)
            Subscription.create(url="http://127.0.0.1:1/d", secret="whsec_d", owner=bob_id)
        settings = webhook_config.settings_of(app)
        stored = queue.store_new_plant(Plant(id=1, owner=alice_id, name="fern"),
                                       "plant.created", '{"id": 1}', settings,
                                       traceparent="00-abc-def-01")
        queue.give_back(stored)
        claimed = queue.claim(10, settings, 10, 10)

    def without_lease(jobs):
        return sorted((dataclasses.replace(job, lease=0, leased_at=0) for job in jobs),
                      key=lambda job: job.delivery_id)
    assert sorted(job.url for job in stored) == ["http://127.0.0.1:1/a", "http://127.0.0.1:1/c"]
    assert without_lease(stored) == without_lease(claimed)


@pytest.fixture
def sqlite_file(tmp_path):
    """A SQLite database as the service opens one, with a table of ids."""
    database = db.database_from_url(f"sqlite:///{tmp_path / 'turns.db'}")
    database.execute_sql("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    database.close()
    yield database
    database.close_all()


def in_thread(target):
    """Run ``target`` in another thread and wait for it; its exception, if any."""
    outcome = []

    def run():
        try:
            target()
        except Exception as error:  # handed back to the test
            outcome.append(error)
    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()
    return outcome[0] if outcome else None


def test_a_failed_sqlite_transaction_ends_its_turn(sqlite_file):
    with pytest.raises(IntegrityError):
        with sqlite_file.atomic():
            sqlite_file.execute_sql("INSERT INTO t VALUES (1)")
            sqlite_file.execute_sql("INSERT INTO t VALUES (1)")

    def write_next():
        with sqlite_file.connection_context(), sqlite_file.atomic():
            sqlite_file.execute_sql("INSERT INTO t VALUES (2)")
    assert in_thread(write_next) is None
    assert sqlite_file.execute_sql("SELECT id FROM t").fetchall() == [(2,)]


def write_row_3(database):
    """A write transaction of its own, from another thread: row 3 into ``t``;
    its exception, if any."""
    def write():
        with database.connection_context(), database.atomic():
            database.execute_sql("INSERT INTO t VALUES (3)")
    return in_thread(write)


def assert_a_writer_gives_up_after_its_bound(database):
    """A writer allowed 0.2 s for its turn gets "database is locked" after it."""
    database.turn_wait_seconds = 0.2
    started = time.monotonic()
    error = write_row_3(database)
    waited = time.monotonic() - started
    assert isinstance(error, OperationalError) and "locked" in str(error)
    assert 0.15 < waited < 5


def test_a_sqlite_writer_waits_its_turn_no_longer_than_the_busy_timeout(sqlite_file):
    with sqlite_file.atomic():
        sqlite_file.execute_sql("INSERT INTO t VALUES (1)")
        assert_a_writer_gives_up_after_its_bound(sqlite_file)
    assert write_row_3(sqlite_file) is None


HOLD_A_WRITE = """
import pathlib, sys
from plantstore import db
database = db.database_from_url(sys.argv[1])
with database.connection_context(), database.atomic():
    database.execute_sql("INSERT INTO t VALUES (7)")
    pathlib.Path(sys.argv[2]).touch()
    sys.stdin.readline()  # until the test says so (or closes the pipe)
"""


def test_a_sqlite_writer_waits_for_another_process_no_longer_than_the_busy_timeout(
        sqlite_file, tmp_path):
    """Another process in the middle of a write transaction: this one's
    writer gives up after its bound (SQLite's own busy timeout is 30 s),
    and writes once the other has committed."""
    holding = tmp_path / "holding"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_A_WRITE, f"sqlite:///{sqlite_file.database}", holding],
        stdin=subprocess.PIPE, text=True)
    try:
        wait_until(holding.exists, timeout=30, message="the other process's transaction")
        assert_a_writer_gives_up_after_its_bound(sqlite_file)
        holder.communicate("\n", timeout=30)
        assert holder.returncode == 0
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert write_row_3(sqlite_file) is None
    assert sqlite_file.execute_sql("SELECT id FROM t ORDER BY id").fetchall() == [(3,), (7,)]


def test_concurrent_sqlite_writers_of_one_process_all_commit(sqlite_file):
    def write(first):
        with sqlite_file.connection_context():
            for plant_id in range(first, first + 25):
                with sqlite_file.atomic():
                    sqlite_file.execute_sql("INSERT INTO t VALUES (?)", (plant_id,))
    threads = [threading.Thread(target=write, args=(n * 100,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    count, = sqlite_file.execute_sql("SELECT count(*) FROM t").fetchone()
    assert count == 150


@pytest.fixture
def access_logger():
    """gunicorn's JSON access logger writing to a string, as
    ``plantstore.server.gunicorn.logconfig`` sets it up.

    The ``gunicorn.*`` loggers are process-wide: their set-up is restored after.
    """
    loggers = [logging.getLogger("gunicorn.access"), logging.getLogger("gunicorn.error")]
    saved = [(log, log.handlers, log.filters, log.propagate, log.level)
             for log in loggers]
    config = GunicornConfig()
    config.set("accesslog", "-")
    logger = JSONAccessLogger(config)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JSONFormatter())
    logger.access_log.filters = []
    logger.access_log.propagate = False

    def only_json_handler():
        """Just the JSON handler (pytest attaches its own to non-propagating loggers)."""
        logger.access_log.handlers = [handler]
    yield logger, stream, only_json_handler
    for log, handlers, filters, propagate, level in saved:
        log.handlers, log.filters, log.propagate = handlers, filters, propagate
        log.setLevel(level)


class _SentResponse:
    """What gunicorn's access() reads of a response: its status and bytes sent."""
    status = "201 CREATED"
    sent = 17


def _access_environ(token):
    return {"REQUEST_METHOD": "GET", "PATH_INFO": "/plants/é\"x", "QUERY_STRING":
            f"limit=2&access_token={token}", "REMOTE_ADDR": "127.0.0.1",
            "wsgi.url_scheme": "http", "HTTP_HOST": "127.0.0.1:8000",
            "HTTP_USER_AGENT": f"agent Bearer {token}",
            REQUEST_ID_ENVIRON_KEY: "req-1.a_b"}


def test_direct_access_line_is_the_line_logging_would_write(access_logger):
    logger, stream, only_json_handler = access_logger
    only_json_handler()
    environ = _access_environ("pst_" + "A" * 43)
    took = datetime.timedelta(microseconds=1234567)
    assert _plain_json_stream_handler(logger.access_log) is not None
    logger.access(_SentResponse, None, environ, took)
    # Any filter on the logger sends the record through logging's own layers.
    logger.access_log.addFilter(lambda record: True)
    assert _plain_json_stream_handler(logger.access_log) is None
    logger.access(_SentResponse, None, environ, took)
    direct, through_logging = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert direct["request_id"] == "req-1.a_b" and direct["status"] == 201
    assert "pst_" not in stream.getvalue() and "[REDACTED]" in direct["query"]
    direct_ts, logged_ts = direct.pop("ts"), through_logging.pop("ts")
    assert list(direct) == list(through_logging) and direct == through_logging
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", direct_ts)
    assert len(direct_ts) == len(logged_ts)


def test_access_line_goes_through_logging_unless_set_up_as_gunicorn_logconfig(access_logger):
    logger, stream, only_json_handler = access_logger
    only_json_handler()
    other = io.StringIO()
    extra = logging.StreamHandler(other)
    extra.setFormatter(JSONFormatter())
    logger.access_log.addHandler(extra)
    logger.access(_SentResponse, None, _access_environ("x"), datetime.timedelta(0))
    assert json.loads(stream.getvalue()) == json.loads(other.getvalue())


@pytest.mark.parametrize("name", ["idempotency-key", "IDEMPOTENCY-KEY"])
def test_a_key_is_read_whatever_the_header_name_s_case(client, alice, name):
    """The create skips the header's schema only when no header of that
    name, in any case, is there: a key so sent is still a key."""
    headers = {**bearer(alice), name: "k-1"}
    first = client.post("/plants", headers=headers, json={"id": 1, "name": "x"})
    again = client.post("/plants", headers=headers, json={"id": 1, "name": "x"})
    assert first.status_code == again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    other = client.post("/plants", headers={**bearer(alice), name: ""},
                        json={"id": 2, "name": "x"})
    assert other.status_code == 400
