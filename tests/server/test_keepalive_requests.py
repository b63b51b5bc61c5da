"""gunicorn closes a kept-alive connection after ``KEEPALIVE_REQUESTS``
requests, so that made anew it may go to another process: one process
never keeps a client's connections for good (docs/server-model.md,
"Balanced processes")."""
import http.client

import pytest

from plantstore.server.gunicorn import KEEPALIVE_REQUESTS


@pytest.mark.slow
def test_a_kept_alive_connection_is_closed_by_its_last_request_answer(gunicorn_server):
    server = gunicorn_server(workers=1)
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    answers = []
    connection.connect()
    sock = connection.sock
    for _ in range(KEEPALIVE_REQUESTS):
        assert connection.sock is sock  # one connection, kept alive until the last
        connection.request("GET", "/healthz")
        response = connection.getresponse()
        response.read()
        answers.append((response.status, response.getheader("Connection")))
    assert answers == [(200, "keep-alive")] * (KEEPALIVE_REQUESTS - 1) + [(200, "close")]
    assert connection.sock is None  # closed after the answer that said so
    connection.request("GET", "/healthz")  # a new connection serves on
    assert connection.getresponse().status == 200
    connection.close()
