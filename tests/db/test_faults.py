"""Faults answered as faults: a full disk, a SQLite file deleted or replaced
under the running service, a database with no schema, a schema older or
newer than the code. Each is a 503 with Retry-After in the contract's shape
(never a 500, never a write acknowledged into a lost file), ``/readyz``
says 503 naming the kind, and the log names the cause in one line."""
import logging
import os
import sqlite3
import subprocess
from urllib.parse import urlsplit

import pytest
import requests
from playhouse.migrations import Migration

from helpers import POSTGRES_URL, assert_error, bearer, create_plant, roll_back_after
from plantstore import create_app, db
from plantstore.db import faults
from plantstore.db.models import Plant, User
from plantstore.web.auth import issue_token

SQLITE_ONLY = pytest.mark.skipif(bool(POSTGRES_URL), reason="a SQLite file's fault; the "
                                                            "SQLite run has it")


def assert_unavailable(response):
    """The contract's 503 with a Retry-After in seconds."""
    body = assert_error(response, 503)
    assert int(response.headers["Retry-After"]) > 0
    return body


def assert_not_ready(client, kind):
    """``/readyz`` is a 503 whose message names ``kind``."""
    body = assert_unavailable(client.get("/readyz"))
    assert body["message"] == f"Not ready: {kind}.", body


def logged(caplog, fragment):
    """The log lines (one record each, no traceback) that hold ``fragment``."""
    lines = [record for record in caplog.records if fragment in record.getMessage()]
    assert all(record.exc_info is None and "\n" not in record.getMessage()
               for record in lines), lines
    return lines


def sqlite_service(path):
    """An app on a new, migrated SQLite file at ``path``, its client and a token."""
    app = create_app({"TESTING": True, "DATABASE_URL": f"sqlite:///{path}"})
    db.upgrade()
    with app.app_context(), db.database.atomic():
        _, token = issue_token(User.create(name="alice"))
    return app, app.test_client(), token


@pytest.fixture
def small_disk(tmp_path):
    """A 8 MiB file system of its own (tmpfs), unmounted afterwards."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)],
                          capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        pytest.skip(f"needs root to mount a tmpfs: {done.stderr.strip()}")
    yield mount
    db.database.close_all()
    subprocess.run(["umount", "--lazy", str(mount)], check=True, timeout=30)


def fill(directory):
    """Write a file in ``directory`` until the file system has no byte left;
    the file's path."""
    filler = directory / "filler"
    descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        for size in (1 << 16, 512, 1):
            try:
                while True:
                    os.write(descriptor, b"\0" * size)
            except OSError:
                pass
    finally:
        os.close(descriptor)
    return filler


@SQLITE_ONLY
def test_a_full_disk_is_a_503_named_in_one_line_and_readiness_says_so(small_disk, caplog):
    app, client, token = sqlite_service(small_disk / "plantstore.db")
    create_plant(client, token, 1)
    filler = fill(small_disk)

    for plant_id in range(2, 8):
        assert_unavailable(client.post("/plants", json={"id": plant_id, "name": "f" * 250},
                                       headers=bearer(token)))
    assert_not_ready(client, "the disk holding the database is full")

    assert len(logged(caplog, "database unavailable: database or disk is full")) == 6
    assert logged(caplog, "the disk holding the database is full: 0 bytes free")
    assert not logged(caplog, "cannot rollback")
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]
    filler.unlink()
    assert client.get("/readyz").status_code == 200
    create_plant(client, token, 9)
    with app.app_context():
        assert [plant.id for plant in Plant.select().order_by(Plant.id)] == [1, 9]


@SQLITE_ONLY
@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_database_file_gone_under_the_service_refuses_writes_and_readiness(
        tmp_path, caplog, how):
    path = tmp_path / "plantstore.db"
    app, client, token = sqlite_service(path)
    create_plant(client, token, 1)
    if how == "deleted":
        path.unlink()
    else:  # a copy put in its place, as a restore would: another file, another inode
        with sqlite3.connect(path) as source, sqlite3.connect(tmp_path / "copy.db") as copy:
            source.backup(copy)
        os.replace(tmp_path / "copy.db", path)

    assert_unavailable(client.post("/plants", json={"id": 2, "name": "Moss"},
                                   headers=bearer(token)))
    assert_unavailable(client.get("/plants", headers=bearer(token)))
    assert_not_ready(client, "database file deleted or replaced")

    assert logged(caplog, f"database file deleted or replaced: {path} was "
                          f"{'deleted' if how == 'deleted' else 'replaced by another file'}")
    assert path.exists() == (how == "replaced")  # no empty file made in its place
    if how == "replaced":
        with sqlite3.connect(path) as restored:
            assert restored.execute("SELECT id FROM plant").fetchall() == [(1,)]


@SQLITE_ONLY
def test_a_service_started_on_a_new_empty_file_says_it_holds_no_schema(tmp_path, caplog):
    path = tmp_path / "plantstore.db"
    token = sqlite_service(path)[2]
    path.unlink()
    db.database.close_all()
    client = create_app({"TESTING": True, "DATABASE_URL": f"sqlite:///{path}"}).test_client()

    assert_not_ready(client, "the database holds no plantstore schema (an empty file, or "
                             "another application's database?)")
    assert_unavailable(client.post("/plants", json={"id": 1, "name": "Fern"},
                                   headers=bearer(token)))
    assert_unavailable(client.get("/plants", headers=bearer(token)))

    assert logged(caplog, "the database holds no plantstore schema")
    assert logged(caplog, "run `plantstore db upgrade` (no such table: token)")
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]


def recorded_migration(name):
    """Record ``name`` as applied, as the release that has it would."""
    with db.database.connection_context():
        db.migration_runner().History.create(name=name)


def forget_migration(name):
    with db.database.connection_context():
        history = db.migration_runner().History
        history.delete().where(history.name == name).execute()


def test_a_schema_newer_than_the_code_is_a_503_and_not_ready(app, client, alice, caplog):
    """As after the next release's contract step: a column this release
    writes renamed, by a migration it does not know."""
    future = "9999_rename_plant_name" + faults.CONTRACT_SUFFIX
    db.database.execute_sql('ALTER TABLE plant RENAME COLUMN name TO title')
    recorded_migration(future)
    try:
        assert_not_ready(client, "the database schema is newer than this release")
        assert_unavailable(client.post("/plants", json={"id": 1, "name": "Fern"},
                                       headers=bearer(alice)))
        assert logged(caplog, f"it holds {future}, which this release does not know")
        assert not [record for record in caplog.records if record.levelno >= logging.ERROR]
    finally:
        forget_migration(future)
        db.database.execute_sql('ALTER TABLE plant RENAME COLUMN title TO name')
    assert client.get("/readyz").status_code == 200
    create_plant(client, alice, 1)


def test_the_next_releases_expand_migration_keeps_this_one_ready(app, client, alice):
    """A rolling upgrade runs this release beside the next one's expand step."""
    recorded_migration("9998_add_an_index")
    try:
        assert client.get("/readyz").status_code == 200
        create_plant(client, alice, 1)
    finally:
        forget_migration("9998_add_an_index")


def test_a_release_whose_expand_steps_follow_an_unfinished_upgrade_is_not_ready(
        app, client, caplog):
    """0014 and 0015 come after 0013, the release before's AFTER_ROLLOUT step:
    while 0013 is pending, they are too, and this release is not ready
    (docs/scaling.md, "Upgrading to this release needs the last one
    finished")."""
    with db.database.connection_context():
        roll_back_after("0012_wider_secrets")
    try:
        assert_not_ready(client, "the database schema is older than this release")
        assert logged(caplog, "the database schema is older than this release: "
                              "0014_job_rows, 0015_job_event_type, 0016_portal, "
                              "0017_delivery_log_index, 0018_due_rule not applied: "
                              "run `plantstore db upgrade`")
    finally:
        db.upgrade()
    assert client.get("/readyz").status_code == 200


def test_a_schema_older_than_the_code_is_not_ready_and_its_failing_writes_are_503(
        app, client, alice, caplog):
    with db.database.connection_context():
        roll_back_after("0013_bigint_ids")  # 0014's view and functions, which a create reads
    try:
        assert_not_ready(client, "the database schema is older than this release")
        assert logged(caplog, "the database schema is older than this release: "
                              "0014_job_rows, 0015_job_event_type, 0016_portal, "
                              "0017_delivery_log_index, 0018_due_rule not applied: "
                              "run `plantstore db upgrade`")
        create = client.post("/plants", json={"id": 1, "name": "Fern"}, headers=bearer(alice))
        if POSTGRES_URL:  # a create calls 0014's functions
            assert_unavailable(create)
        else:  # with no subscription a create reads nothing 0014 adds on SQLite
            assert create.status_code == 200
        assert not [record for record in caplog.records
                    if record.levelno >= logging.ERROR and record.name == "plantstore.web.errors"]
    finally:
        db.upgrade()
    assert client.get("/readyz").status_code == 200


@pytest.mark.skipif(not POSTGRES_URL, reason="PostgreSQL's; SQLite's empty file is above")
def test_an_empty_postgresql_database_says_it_holds_no_schema(postgres_migrated, caplog):
    name = f"plantstore_empty_{os.getpid()}"
    admin = db.database_from_url(POSTGRES_URL)
    with admin.connection_context():
        admin.execute_sql(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute_sql(f'CREATE DATABASE "{name}"')
    try:
        client = create_app({"TESTING": True, "DATABASE_URL": POSTGRES_URL.rsplit("/", 1)[0]
                             + f"/{name}"}).test_client()
        assert_not_ready(client, "the database holds no plantstore schema (an empty file, "
                                 "or another application's database?)")
        assert_unavailable(client.get("/plants", headers=bearer("pst_" + "x" * 43)))
        assert logged(caplog, "the database holds no plantstore schema")
        db.database.close_all()
    finally:
        with admin.connection_context():
            admin.execute_sql(f'DROP DATABASE IF EXISTS "{name}"')
        admin.close_all()


def test_every_after_rollout_migration_is_named_so_that_older_releases_know_it():
    """The release before reads an unknown migration's name, not its module:
    ``_after_rollout`` is how it knows it cannot run beside it (0013, older
    than this rule, is known to every release that reads names)."""
    for migration in Migration.load_directory(db.MIGRATIONS_DIR):
        named = migration.name.endswith(faults.CONTRACT_SUFFIX) \
            or migration.name == "0013_bigint_ids"
        assert getattr(migration.load(), "AFTER_ROLLOUT", False) == named, migration.name


@SQLITE_ONLY
@pytest.mark.slow
def test_gunicorn_acknowledges_no_create_into_a_deleted_file(gunicorn_server, alice,
                                                              database_url):
    """The issue's case: every worker of a real gunicorn refuses, none answers
    200 into the unlinked file, and a restart finds no schema rather than
    serving 500s."""
    server = gunicorn_server(workers=2)
    url = server.url
    assert requests.post(f"{url}/plants", json={"id": 1, "name": "Fern"},
                         headers=bearer(alice), timeout=10).status_code == 200
    path = urlsplit(database_url).path[1:]
    os.unlink(path)

    answers = [requests.post(f"{url}/plants", json={"id": n, "name": "Moss"},
                             headers=bearer(alice), timeout=10) for n in range(2, 12)]
    assert [answer.status_code for answer in answers] == [503] * 10
    assert all(answer.json()["error"] == 503 and answer.headers["Retry-After"]
               for answer in answers)
    readiness = requests.get(f"{url}/readyz", timeout=10)
    assert readiness.status_code == 503
    assert readiness.json()["message"] == "Not ready: database file deleted or replaced."
    assert not os.path.exists(path)
    server.stop()
    assert "database file deleted or replaced" in server.output()
    assert "Traceback" not in server.output()

    for leftover in ("-wal", "-shm"):  # as an operator clearing up would
        os.unlink(path + leftover)
    restarted = gunicorn_server(workers=1)
    assert requests.get(f"{restarted.url}/readyz", timeout=10).json()["message"] == (
        "Not ready: the database holds no plantstore schema (an empty file, or another "
        "application's database?).")
    assert requests.get(f"{restarted.url}/plants", headers=bearer(alice),
                        timeout=10).status_code == 503
