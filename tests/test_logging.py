"""Logs: one JSON object per line, a request id on each, no token ever."""
import io
import json
import logging
import os
import re

import pytest
import requests

from helpers import bearer, plantstore_env, run_plantstore
from plantstore.logs import JSONFormatter, redact


@pytest.mark.parametrize("sent", ["abc", "req-1.2_3", "A" * 128])
def test_a_sane_client_request_id_is_kept_and_returned(client, sent):
    response = client.get("/healthz", headers={"X-Request-ID": sent})
    assert response.headers["X-Request-ID"] == sent


@pytest.mark.parametrize("sent", ["", "A" * 129, "has space", "semi;colon", "ünï",
                                  "pst_" + "x" * 43])
def test_an_insane_or_token_shaped_request_id_is_replaced(client, sent):
    response = client.get("/healthz", headers={"X-Request-ID": sent})
    assert re.fullmatch(r"[0-9a-f]{32}", response.headers["X-Request-ID"])


def test_requests_without_an_id_get_distinct_ones_also_on_errors(client):
    ids = {client.get(path).headers["X-Request-ID"] for path in ("/healthz", "/nope", "/plants")}
    assert len(ids) == 3


@pytest.fixture
def json_log(app):
    """What the app logs during the test, through JSONFormatter."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JSONFormatter())
    logger = logging.getLogger("plantstore")
    logger.addHandler(handler)
    yield stream
    logger.removeHandler(handler)


def test_an_application_log_line_is_json_with_the_request_id(app, json_log):
    def explode():
        """A view with a bug."""
        raise RuntimeError("database melted")
    app.add_url_rule("/explode", view_func=explode)
    response = app.test_client().get("/explode", headers={"X-Request-ID": "boom-1"})
    assert response.status_code == 500
    assert response.get_json() == {"error": 500,
                                   "message": "The server could not complete the request."}
    assert response.headers["X-Request-ID"] == "boom-1"
    (line,) = json_log.getvalue().splitlines()
    entry = json.loads(line)
    assert entry["level"] == "error"
    assert entry["logger"] == "plantstore.errors"
    assert entry["request_id"] == "boom-1"
    assert "RuntimeError: database melted" in entry["exception"]


def test_redact_masks_tokens_bearer_credentials_and_access_token_parameters():
    assert redact("token pst_abcDEF123-_x here") == "token [REDACTED] here"
    assert redact("Authorization: Bearer sekrit") == "Authorization: Bearer [REDACTED]"
    assert (redact("limit=2&access_token=sekrit&after=3")
            == "limit=2&access_token=[REDACTED]&after=3")
    assert redact("GET /plants 200") == "GET /plants 200"


@pytest.mark.slow
def test_gunicorn_output_is_json_lines_with_request_ids_and_no_tokens(gunicorn_server, alice):
    server = gunicorn_server(workers=2)
    other = "pst_" + "Q" * 43
    answers = [
        requests.get(server.url + "/plants", headers=bearer(alice), timeout=5),
        requests.post(server.url + "/plants", json={"id": 3, "name": "fern"},
                      headers={**bearer(alice), "X-Request-ID": "create-3"}, timeout=5),
        requests.get(server.url + "/plants", headers=bearer(other), timeout=5),
        requests.get(server.url + f"/plants?access_token={alice}&limit=1", timeout=5),
        requests.get(server.url + "/healthz", headers={"X-Request-ID": alice}, timeout=5),
        requests.delete(server.url + f"/plants/{alice}", headers=bearer(alice), timeout=5),
        requests.get(server.url + "/plants", headers={"Authorization": f"Bearer {alice}x"},
                     timeout=5),
    ]
    assert [answer.status_code for answer in answers] == [200, 200, 401, 401, 200, 400, 401]
    server.stop()
    output = server.output()
    entries = [json.loads(line) for line in output.splitlines()]  # every line is JSON
    access = [entry for entry in entries if entry["logger"] == "gunicorn.access"]
    assert len(access) >= len(answers)
    logged_ids = {entry["request_id"] for entry in access}
    assert {answer.headers["X-Request-ID"] for answer in answers} <= logged_ids
    assert "create-3" in logged_ids
    assert alice not in output
    assert alice[4:] not in output
    assert other not in output
    assert not re.search(r"pst_(?!\[REDACTED\])", output)


def test_the_plantstore_command_logs_json_lines_on_stderr(tmp_path):
    env = {**os.environ, **plantstore_env(f"sqlite:///{tmp_path / 'cli.db'}")}
    done = run_plantstore("db", "upgrade", env=env, cwd=None)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("applied ")
    entries = [json.loads(line) for line in done.stderr.splitlines()]
    assert any(entry["logger"] == "peewee.migrations" and entry["level"] == "info"
               for entry in entries), done.stderr
