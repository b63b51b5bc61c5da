"""The endpoints page reads the database in as many statements whatever the
number of endpoints: each endpoint's last attempt comes in one statement."""
import logging

from plantstore.db.models import Attempt, Delivery
from plugins.portal import add_endpoint, enter


def _statements(caplog, client, path):
    """The SQL statements ``client``'s GET of ``path`` ran (peewee's query log)."""
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="peewee"):
        response = client.get(path)
    assert response.status_code == 200
    return [record.msg[0] for record in caplog.records
            if record.name == "peewee" and isinstance(record.msg, tuple)]


def _endpoint_with_attempts(client, csrf, number):
    subscription_id = add_endpoint(client, csrf, url=f"http://127.0.0.1:9/hook{number}")
    for n in range(2):
        delivery = Delivery.create(subscription=subscription_id, payload="{}",
                                   message_id=f"msg_{number}_{n}", event_type="plant.created")
        Attempt.create(delivery=delivery.id, status_code=500 + number * 2 + n,
                       duration_ms=5)
    return subscription_id


def test_the_endpoints_page_reads_last_attempts_in_one_statement(caplog, client, alice):
    csrf = enter(client, alice)
    _endpoint_with_attempts(client, csrf, 0)
    one_endpoint = _statements(caplog, client, "/portal/endpoints")
    for number in range(1, 6):
        _endpoint_with_attempts(client, csrf, number)
    add_endpoint(client, csrf, url="http://127.0.0.1:9/never-tried")
    many = _statements(caplog, client, "/portal/endpoints")
    assert len(many) == len(one_endpoint), many
    assert len([sql for sql in many if '"attempt"' in sql]) == 1, many
    page = client.get("/portal/endpoints").text
    for number in range(6):  # each endpoint's newest attempt, of its newest delivery
        assert f"HTTP {500 + number * 2 + 1} at" in page
        assert f"HTTP {500 + number * 2} at" not in page
    assert "none yet" in page
