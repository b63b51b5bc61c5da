"""``/metrics`` scraped through a database outage (a PostgreSQL of the
test's own, stopped and started again): every scrape answers, without the
database's gauges meanwhile; the log says so in one line when the outage
starts and in one when it ends, as the webhook worker does: no traceback,
not a line per scrape."""
import logging

import pytest

from plantstore import create_app, db

GAUGE = "plantstore_outbox_pending_deliveries"
SCRAPES = 5


def scrape(client):
    answer = client.get("/metrics")
    assert answer.status_code == 200
    return answer.get_data(as_text=True)


def logged(caplog):
    """(level, message, with a traceback) of each record of the gauges' logger."""
    return [(record.levelname, record.getMessage(), record.exc_info is not None)
            for record in caplog.records if record.name.endswith("engine.gauges")]


@pytest.mark.slow
def test_a_scrape_through_an_outage_logs_one_line_when_it_starts_and_one_when_it_ends(
        throwaway_postgres, caplog):
    app = create_app({"TESTING": True, "DATABASE_URL": throwaway_postgres.url})
    with app.app_context():
        db.upgrade()
    client = app.test_client()
    with caplog.at_level(logging.INFO):
        assert f"{GAUGE} 0.0" in scrape(client)
        throwaway_postgres.stop()
        for _ in range(SCRAPES):
            assert GAUGE not in scrape(client)
        throwaway_postgres.start()
        assert f"{GAUGE} 0.0" in scrape(client) + scrape(client)  # a stale connection may fail once
        for _ in range(SCRAPES):
            assert f"{GAUGE} 0.0" in scrape(client)
    [(level, message, traceback), ended] = logged(caplog)
    assert (level, traceback) == ("WARNING", False)
    assert message.startswith("the webhook gauges are left out of /metrics: the database "
                              "cannot serve ("), message
    assert "\n" not in message
    assert ended == ("INFO", "the webhook gauges are on /metrics again: the database serves",
                     False)
