"""The database going away is a 503 with Retry-After, never a 500, and
service resumes by itself when it is back."""
import concurrent.futures
import logging
import os
import time

import pytest

from helpers import POSTGRES_URL, assert_error, bearer, free_port, wait_until
from plantstore import create_app, db
from plantstore.db.models import Plant, User
from plantstore.housekeeping.runner import Housekeeping
from plantstore.web.auth import issue_token
from plantstore.webhooks.config import settings_of


def _unreachable_urls():
    """A PostgreSQL nobody listens on, and a SQLite file that cannot be opened."""
    return [f"postgresql://postgres@127.0.0.1:{free_port()}/nothing",
            "sqlite:////nonexistent-directory/plantstore.db"]


def assert_unavailable(response):
    """The contract's 503, with a Retry-After in seconds."""
    assert_error(response, 503)
    assert int(response.headers["Retry-After"]) > 0


@pytest.mark.parametrize("url", _unreachable_urls(), ids=["postgresql", "sqlite"])
def test_the_workers_housekeeping_says_nothing_of_its_own_while_the_database_is_away(
        url, caplog):
    """The worker's loop says once that the database cannot serve; its
    housekeeping adds no traceback per task and run."""
    app = create_app({"TESTING": True, "DATABASE_URL": url})
    with app.app_context(), caplog.at_level(logging.DEBUG):
        Housekeeping().run_if_due(settings_of(app), force=True)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.parametrize("url", _unreachable_urls(), ids=["postgresql", "sqlite"])
def test_every_route_needing_the_database_is_a_503_while_it_is_unreachable(url):
    client = create_app({"TESTING": True, "DATABASE_URL": url}).test_client()
    token = bearer("pst_" + "x" * 43)
    assert_unavailable(client.get("/plants", headers=token))
    assert_unavailable(client.post("/plants", json={"id": 1, "name": "Fern"}, headers=token))
    assert_unavailable(client.delete("/plants/1", headers=token))
    assert_unavailable(client.get("/readyz"))
    assert client.get("/healthz").status_code == 200


@pytest.mark.slow
def test_a_restarted_postgresql_is_a_503_meanwhile_then_served_again(throwaway_postgres):
    app = create_app({"TESTING": True, "DATABASE_URL": throwaway_postgres.url})
    with app.app_context():
        db.upgrade()
        with db.database.atomic():
            _, secret = issue_token(User.create(name="alice"))
    client = app.test_client()
    assert client.post("/plants", json={"id": 1, "name": "Fern"},
                       headers=bearer(secret)).status_code == 200

    throwaway_postgres.stop()
    assert_unavailable(client.get("/plants", headers=bearer(secret)))
    assert_unavailable(client.post("/plants", json={"id": 2, "name": "Moss"},
                                   headers=bearer(secret)))
    assert_unavailable(client.get("/readyz"))

    throwaway_postgres.start()
    wait_until(lambda: client.get("/plants", headers=bearer(secret)).status_code == 200,
               timeout=30, interval=0.2, message="service resuming after the restart")
    assert client.get("/plants", headers=bearer(secret)).get_json() == [{"name": "Fern"}]
    assert client.get("/readyz").status_code == 200
    db.database.close_all()


@pytest.mark.skipif(not POSTGRES_URL, reason="a statement timeout is PostgreSQL's")
@pytest.mark.app_config({"DATABASE_URL": f"{POSTGRES_URL}?options=-c%20statement_timeout%3D1s"})
def test_a_create_the_database_stalls_is_a_503_at_its_statement_timeout(
        app, client, alice, stalled_writes):
    """With ``statement_timeout`` set (here in the URL; see operating.md), a
    create whose statement waits on a lock another transaction holds gives
    its thread back at the timeout with a 503, having written nothing; once
    the lock is gone, the same create succeeds."""
    plant = {"id": 1, "name": "Fern"}
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        answer = pool.submit(app.test_client().post, "/plants", json=plant,
                             headers=bearer(alice))
        try:
            stalled = answer.result(timeout=60)
        finally:
            stalled_writes()
    waited = time.monotonic() - started
    assert_unavailable(stalled)
    assert 0.9 < waited < 30, waited  # it waited for the lock, then for no more than the timeout
    with app.app_context():
        assert Plant.select().count() == 0
    assert client.post("/plants", json=plant, headers=bearer(alice)).status_code == 200


@pytest.mark.slow
def test_a_worker_says_once_that_the_database_is_gone_and_once_that_it_is_back(
        throwaway_postgres, start_worker):
    """A running worker whose database stops: one line when it goes, one when
    it is back (not a traceback at every poll), and it goes on working."""
    app = create_app({"TESTING": True, "DATABASE_URL": throwaway_postgres.url})
    with app.app_context():
        db.upgrade()
    poll = 0.1
    worker = start_worker({**os.environ, "PLANTSTORE_DATABASE_URL": throwaway_postgres.url,
                           "PLANTSTORE_WORKER_POLL_INTERVAL": str(poll)})
    worker.wait_started()
    throwaway_postgres.stop()

    def gone_lines():
        return [m for m in worker.messages() if "the database cannot serve" in m]
    wait_until(gone_lines, timeout=30, message="the worker to say the database is gone")
    time.sleep(20 * poll)  # the outage lasts 20 polls: each one fails again
    throwaway_postgres.start()
    wait_until(lambda: "webhook worker: the database serves again" in worker.messages(),
               timeout=60, interval=0.1, message="the worker to say the database is back")
    assert worker.stop() == 0, worker.output()[-3000:]
    assert len(gone_lines()) == 1, worker.output()[-3000:]
    assert "Traceback" not in worker.output(), worker.output()[-3000:]
