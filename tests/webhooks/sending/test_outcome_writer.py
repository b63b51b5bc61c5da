"""The outcome writer (``webhooks/sending/outcome_writer.py``): a batch no row can
poison, and a bounded backlog the worker waits on before it claims more."""
import threading

from plantstore.db import clock, database, is_sqlite
from plantstore.db.models import Attempt, Delivery
from plantstore.housekeeping.runner import Housekeeping
from plantstore.webhooks.config import settings_of
from plantstore.webhooks.engine import queue
from plantstore.webhooks.sending import outcome_writer
from plantstore.webhooks.sending.http_post import SendResult
from plantstore.webhooks.sending.outcome_writer import OutcomeWriter
from plantstore.webhooks.sending.worker import Worker
from plugins.webhooks import store_plants, subscribe


def answered(status, duration_ms=5):
    return SendResult(clock.local_now(), duration_ms, status_code=status)


def test_a_row_the_database_refuses_is_failed_alone_and_the_others_are_written(
        app, runner, alice, caplog):
    subscribe(runner, "http://127.0.0.1:9/hook")
    settings = settings_of(app)
    delivered, retried, poisoned = store_plants(app, [1, 2, 3])
    writer = OutcomeWriter(settings)
    # a duration no integer column holds: PostgreSQL refuses the row; SQLite,
    # which would store it as a real number, is made to refuse it too
    if is_sqlite():
        with database.connection_context():
            database.execute_sql(
                "CREATE TRIGGER refuse_huge_durations BEFORE INSERT ON attempt "
                "WHEN NEW.duration_ms > 9223372036854775807 "
                "BEGIN SELECT RAISE(ABORT, 'duration out of range'); END")
    for job, result in ((delivered, answered(200)), (poisoned, answered(500, 2**70)),
                        (retried, answered(500))):
        writer.put(job, result)

    assert writer.flush(60)
    assert Delivery.get_by_id(delivered.delivery_id).status == Delivery.DELIVERED
    again = Delivery.get_by_id(retried.delivery_id)
    assert (again.status, again.attempts) == (Delivery.PENDING, 1)
    failed = Delivery.get_by_id(poisoned.delivery_id)
    assert failed.status == Delivery.FAILED and failed.locked_until is None
    assert failed.last_error.startswith("the attempt's outcome could not be stored: ")
    logged = {a.delivery_id: a for a in Attempt.select()}
    assert set(logged) == {delivered.delivery_id, retried.delivery_id, poisoned.delivery_id}
    assert logged[poisoned.delivery_id].error == failed.last_error
    assert any("trying again" in r.getMessage() for r in caplog.records)  # retried first


def test_past_its_bound_of_unwritten_outcomes_a_worker_claims_nothing_until_they_drain(
        app, runner, alice, monkeypatch):
    subscribe(runner, "http://127.0.0.1:9/hook")
    settings = settings_of(app)
    jobs = store_plants(app, [1, 2, 3])
    store_plants(app, [4], give_back=True)  # due: what the worker would claim
    monkeypatch.setattr(outcome_writer, "BACKLOG_BOUND", 3)
    writing, drain = threading.Event(), threading.Event()
    record = queue.record

    def slow_record(*args, **kwargs):  # a database slow to take the batch
        writing.set()
        assert drain.wait(30)
        return record(*args, **kwargs)
    monkeypatch.setattr(queue, "record", slow_record)
    claims = []
    claim = queue.claim
    monkeypatch.setattr(queue, "claim", lambda *a, **k: claims.append(
        worker.writer.unwritten()) or claim(*a, **k))

    worker = Worker(settings, Housekeeping())
    for job in jobs:
        worker.writer.put(job, answered(500))
    assert writing.wait(30) and worker.writer.backlogged()
    running = threading.Thread(target=worker.run_once)
    running.start()
    running.join(0.5)
    assert running.is_alive() and claims == []  # waiting for the outcomes to drain
    drain.set()
    running.join(60)
    assert not running.is_alive()
    assert claims and claims[0] < 3
    assert Delivery.select().where(Delivery.status == Delivery.DELIVERED).count() == 0
    assert Attempt.select().count() == 3 + 1  # the backlog's, then plant 4's attempt
