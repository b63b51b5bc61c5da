"""The housekeeping runner: a task that fails is logged and the others run on."""
import logging
import types

from plantstore.housekeeping import runner
from plantstore.housekeeping.runner import Housekeeping
from plantstore.webhooks.config import settings_of


def test_a_housekeeping_task_that_fails_for_another_reason_is_logged_with_its_traceback(
        app, monkeypatch, caplog):
    def run(settings):
        raise ValueError("a bug")
    broken = types.SimpleNamespace(__name__="plantstore.housekeeping.broken", run=run)
    monkeypatch.setattr(runner, "TASKS", (broken,))
    with app.app_context(), caplog.at_level(logging.ERROR):
        Housekeeping().run_if_due(settings_of(app), force=True)
    [record] = caplog.records
    assert record.getMessage().startswith("housekeeping task broken failed")
    assert record.exc_info[0] is ValueError
