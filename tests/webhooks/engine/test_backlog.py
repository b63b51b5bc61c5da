"""The backlog of deliveries waiting for a worker: the oldest due one's age
by the database's clock, and the web process's warning when no worker
claims (at most once per period, never a query per delivery left)."""
import logging
import re

import pytest

from plantstore import create_app, db
from plantstore.db import clock
from plantstore.db.models import Delivery, Subscription
from plantstore.webhooks.engine import backlog

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
WARNING = re.compile(r"the oldest due one has waited (\d+) s")


def add_deliveries(app, *rows):
    """Store deliveries of one subscription straight in the database, each
    given as (status, seconds since it became due, seconds its lease has
    left or None); times by the database's clock."""
    with app.app_context(), db.database.atomic():
        subscription = Subscription.create(url="http://127.0.0.1:9/hook", secret=SECRET)
        for number, (status, due_for, lease_left) in enumerate(rows):
            Delivery.create(
                subscription=subscription, message_id=f"msg_{number}",
                event_type="plant.created", payload="{}", status=status,
                next_attempt_at=clock.before(due_for),
                locked_until=None if lease_left is None else clock.after(lease_left))


def warned_ages(caplog):
    """The ages the backlog warnings logged so far name, in order."""
    return [int(WARNING.search(record.getMessage()).group(1)) for record in caplog.records
            if record.name == "plantstore.webhooks.engine.backlog"
            and record.levelno == logging.WARNING and WARNING.search(record.getMessage())]


def test_the_oldest_due_age_counts_only_pending_due_and_unleased_deliveries(app):
    add_deliveries(app,
                   (Delivery.PENDING, 120, None),     # due for two minutes: this one
                   (Delivery.PENDING, 50, -10),       # its sender's lease ran out
                   (Delivery.PENDING, 3000, 60),      # a sender holds it
                   (Delivery.PENDING, -600, None),    # due in ten minutes
                   (Delivery.FAILED, 9000, None),
                   (Delivery.DELIVERED, 9000, None))
    with app.app_context():
        assert 120 <= backlog.oldest_due_age() < 120 + 60


def test_the_oldest_due_age_is_zero_when_nothing_is_due(app):
    add_deliveries(app, (Delivery.PENDING, -600, None), (Delivery.PENDING, 3000, 60),
                   (Delivery.FAILED, 9000, None))
    with app.app_context():
        assert backlog.oldest_due_age() == 0.0


class Ticks:
    """A monotonic clock the test moves by hand."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def statements(caplog):
    """How many SQL statements peewee has logged so far."""
    return sum(record.name == "peewee" for record in caplog.records)


def test_an_old_backlog_is_warned_once_per_period_with_its_age_and_no_query_per_note(
        app, caplog):
    add_deliveries(app, (Delivery.PENDING, 600, None), (Delivery.PENDING, 30, None))
    ticks = Ticks()
    watch = backlog.BacklogWatch(threshold=300, period=60, monotonic=ticks)
    caplog.set_level(logging.DEBUG, logger="peewee")
    caplog.set_level(logging.WARNING, logger="plantstore.webhooks.engine.backlog")

    with app.app_context():
        watch.check()
        one_check = statements(caplog)
        caplog.clear()
        for _ in range(500):
            watch.note()
        [age] = warned_ages(caplog)
        assert 600 <= age < 600 + 60
        assert statements(caplog) == one_check

        ticks.now += 59.9
        for _ in range(500):
            watch.note()
        assert len(warned_ages(caplog)) == 1
        assert statements(caplog) == one_check

        ticks.now += 0.2  # the period has passed: one more check, one more warning
        for _ in range(500):
            watch.note()
        assert len(warned_ages(caplog)) == 2
        assert statements(caplog) == 2 * one_check


@pytest.mark.parametrize("rows", [
    [(Delivery.PENDING, 30, None)],      # fresh: the workers are keeping up
    [(Delivery.PENDING, 3000, 60)],      # old, but a sender holds it
    [(Delivery.FAILED, 3000, None)],
    [],
])
def test_a_fresh_or_empty_backlog_is_not_warned(app, caplog, rows):
    add_deliveries(app, *rows)
    ticks = Ticks()
    watch = backlog.BacklogWatch(threshold=300, period=60, monotonic=ticks)
    caplog.set_level(logging.WARNING, logger="plantstore.webhooks.engine.backlog")
    with app.app_context():
        for _ in range(3):
            for _ in range(100):
                watch.note()
            ticks.now += 61
    assert caplog.records == []


@pytest.mark.app_config({"WEBHOOK_BACKLOG_WARN_SECONDS": 100})
def test_the_app_warns_once_when_deliveries_left_to_workers_wait_past_its_setting(
        app, caplog):
    add_deliveries(app, (Delivery.PENDING, 150, None))
    caplog.set_level(logging.WARNING, logger="plantstore.webhooks.engine.backlog")
    for _ in range(200):  # far within one period
        backlog.note_left_to_workers()
    [age] = warned_ages(caplog)
    assert 150 <= age < 150 + 60
    assert "more than 100 s" in caplog.records[0].getMessage()


def test_an_unreadable_database_is_logged_and_never_raised(tmp_path, caplog):
    create_app({"TESTING": True,
                "DATABASE_URL": f"sqlite:///{tmp_path / 'missing' / 'x.db'}"})
    caplog.set_level(logging.WARNING, logger="plantstore.webhooks.engine.backlog")
    backlog.note_left_to_workers()
    assert [record.getMessage() for record in caplog.records] == [
        "could not read the age of the webhook backlog"]
