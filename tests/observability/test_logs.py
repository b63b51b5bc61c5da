"""Logs: one JSON object per line (or a text line in a terminal), a request
id on each, each line once, no token ever."""
import io
import json
import logging
import os
import pty
import re
import subprocess
import sys

import pytest
import requests

from helpers import PLANTSTORE, bearer, plantstore_env, run_plantstore
from plantstore.db import MIGRATIONS_DIR
from plantstore.observability.logs import JSONFormatter, TextFormatter, log_format, redact

# A text line: time, [pid], level, logger: message, then key=value fields.
TEXT_LINE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \[\d+\] "
                       r"(?P<level>[A-Z]+) +(?P<logger>[\w.]+): (?P<rest>.*)")


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
    assert entry["logger"] == "plantstore.web.errors"
    assert entry["request_id"] == "boom-1"
    assert "RuntimeError: database melted" in entry["exception"]


def test_redact_masks_tokens_bearer_credentials_and_access_token_parameters():
    assert redact("token pst_abcDEF123-_x here") == "token [REDACTED] here"
    assert redact("Authorization: Bearer sekrit") == "Authorization: Bearer [REDACTED]"
    assert (redact("limit=2&access_token=sekrit&after=3")
            == "limit=2&access_token=[REDACTED]&after=3")
    assert redact("GET /plants 200") == "GET /plants 200"


@pytest.mark.parametrize("credential", ["tokensecret", "token-abc", "tokens_1", "TOKEN2"])
def test_redact_keeps_the_words_after_bearer_in_a_sentence_and_masks_every_credential(
        credential):
    assert redact(f"Authorization: Bearer {credential}") == "Authorization: Bearer [REDACTED]"
    sentence = "Bearer tokens are shown once. Give the receiver a bearer token: see BEARER TOKEN."
    assert redact(sentence) == sentence


def test_the_plain_text_warning_of_a_process_reads_as_written(database_url, app, tmp_path):
    done = run_plantstore("worker", "--once", cwd=tmp_path,
                          env={**os.environ, **plantstore_env(database_url)})
    assert done.returncode == 0, done.stderr
    [warning] = [json.loads(line)["message"] for line in done.stderr.splitlines()
                 if "plain text" in line]
    assert warning.startswith("webhook signing secrets and bearer tokens are stored in plain "
                              "text: set PLANTSTORE_ENCRYPTION_KEYS"), warning


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


@pytest.mark.slow
@pytest.mark.parametrize("line_format", ["text", "json"])
def test_a_path_cannot_forge_a_log_line_or_reach_the_terminal(gunicorn_server, line_format):
    server = gunicorn_server(workers=1, env={"PLANTSTORE_LOG_FORMAT": line_format})
    forged = "2026-01-01T00:00:00.000Z%20[1]%20INFO%20%20%20%20plantstore:%20forged"
    for path in (f"/nothing%0a{forged}", f"/nothing%0d%0a{forged}", "/red%1b[31mtext%1b[0m",
                 "/csi%c2%9b2J"):
        assert requests.get(server.url + path, timeout=5).status_code == 404
    server.stop()
    output = server.output()
    lines = output.splitlines()
    if line_format == "text":
        assert all(TEXT_LINE.fullmatch(line) for line in lines), lines
        assert "GET /nothing\\n2026-01-01T00:00:00.000Z [1] INFO    plantstore: forged" \
            in output
    else:
        assert all(json.loads(line) for line in lines)
    assert not any(line.startswith("2026-01-01") for line in lines)
    assert not any(char in output for char in "\r\x1b\x9b")


def test_the_plantstore_command_logs_json_lines_on_stderr(tmp_path):
    env = {**os.environ, **plantstore_env(f"sqlite:///{tmp_path / 'cli.db'}"),
           "LOG_LEVEL": "debug"}
    env.pop("PLANTSTORE_LOG_FORMAT", None)
    done = run_plantstore("db", "check", env=env, cwd=None)
    assert done.returncode == 0, done.stderr
    entries = [json.loads(line) for line in done.stderr.splitlines()]  # every line is JSON
    assert any(entry["logger"] == "peewee" and entry["level"] == "debug"
               for entry in entries), done.stderr


def test_each_migration_applied_is_told_once(tmp_path):
    env = {**os.environ, **plantstore_env(f"sqlite:///{tmp_path / 'cli.db'}")}
    done = run_plantstore("db", "upgrade", env=env, cwd=None)
    assert done.returncode == 0, done.stderr
    migrations = sorted(name.removesuffix(".py") for name in os.listdir(MIGRATIONS_DIR)
                        if re.fullmatch(r"\d{4}_\w+\.py", name))
    assert done.stdout.splitlines() == [f"applied {name}" for name in migrations]
    output = done.stdout + done.stderr
    assert all(output.count(name) == 1 for name in migrations), output


def test_the_command_logs_text_lines_in_a_terminal_and_when_told(tmp_path):
    env = {**os.environ, **plantstore_env(f"sqlite:///{tmp_path / 'cli.db'}"),
           "LOG_LEVEL": "debug"}
    env.pop("PLANTSTORE_LOG_FORMAT", None)
    # stderr a real terminal (a pseudo-terminal), the format left to `auto`.
    controller, terminal = pty.openpty()
    with open(controller, "rb", buffering=0) as screen:
        done = subprocess.run([str(PLANTSTORE), "db", "check"], env=env, stdout=subprocess.PIPE,
                              stderr=terminal, text=True, timeout=60)
        os.close(terminal)
        shown = b""
        while True:
            try:
                chunk = screen.read(65536)
            except OSError:  # EIO: the terminal's other end is closed and drained
                break
            if not chunk:
                break
            shown += chunk
    assert done.returncode == 0 and done.stdout == "the database answers\n"
    lines = shown.decode().splitlines()
    assert lines and all(TEXT_LINE.fullmatch(line) for line in lines), lines
    assert any(TEXT_LINE.fullmatch(line)["logger"] == "peewee" for line in lines)

    told = run_plantstore("db", "check", env={**env, "PLANTSTORE_LOG_FORMAT": "text"},
                          cwd=None)
    assert told.returncode == 0
    assert all(TEXT_LINE.fullmatch(line) for line in told.stderr.splitlines()), told.stderr


def test_auto_is_text_on_a_terminal_and_json_elsewhere():
    controller, terminal = pty.openpty()
    try:
        with open(terminal, "w", closefd=False) as on_a_terminal:
            assert log_format({}, on_a_terminal) == "text"
            assert log_format({"PLANTSTORE_LOG_FORMAT": "json"}, on_a_terminal) == "json"
    finally:
        os.close(controller)
        os.close(terminal)
    assert log_format({}, io.StringIO()) == "json"
    assert log_format({"PLANTSTORE_LOG_FORMAT": "text"}, io.StringIO()) == "text"


def test_a_text_line_carries_the_fields_and_the_traceback_and_no_token():
    token = "pst_" + "Z" * 43
    try:
        raise RuntimeError(f"failed for {token}")
    except RuntimeError:
        record = logging.getLogger("plantstore.web.errors").makeRecord(
            "plantstore.web.errors", logging.ERROR, __file__, 1, "unhandled error for %s",
            (f"Bearer {token}",), exc_info=sys.exc_info(), extra={"fields": {
                "request_id": "abc.1", "method": "GET", "user_agent": "curl 8",
                "bytes": 2, "query": None}})
    head, *traceback = TextFormatter().format(record).splitlines()
    line = TEXT_LINE.fullmatch(head)
    assert (line["level"], line["logger"]) == ("ERROR", "plantstore.web.errors")
    assert line["rest"] == ('unhandled error for Bearer [REDACTED]  '
                            'request_id=abc.1 user_agent="curl 8" bytes=2')
    assert traceback[0] == "  Traceback (most recent call last):"
    assert traceback[-1] == "  RuntimeError: failed for [REDACTED]"


FORGED = "2026-01-01T00:00:00.000Z [1] INFO    plantstore: forged"


def test_a_text_line_escapes_what_could_forge_a_line_or_reach_the_terminal():
    try:
        raise RuntimeError(f"failed\n{FORGED}\x1b[2J")
    except RuntimeError:
        record = logging.getLogger("plantstore.web.errors").makeRecord(
            "plantstore.web.errors", logging.ERROR, __file__, 1, "GET %s 404",
            (f"/a\n{FORGED}\r\x1b[31m\u2028\x7f",), exc_info=sys.exc_info(), extra={
                "fields": {"user_agent": f"x\x1b[2J\n{FORGED}", "host": "h\x7f"}})
    head, *traceback = TextFormatter().format(record).splitlines()

    assert TEXT_LINE.fullmatch(head)["rest"] == (
        f"GET /a\\n{FORGED}\\r\\x1b[31m\\u2028\\x7f 404  "
        f'user_agent="x\\u001b[2J\\n{FORGED}" host="h\\u007f"')
    assert all(line.startswith("  ") for line in traceback), traceback
    assert traceback[-2:] == ["  RuntimeError: failed", f"  {FORGED}\\x1b[2J"]
    assert not any(char in head + "".join(traceback) for char in "\r\x1b\x7f\u2028")


@pytest.mark.slow
@pytest.mark.parametrize("line_format", ["text", "json"])
def test_gunicorn_writes_each_line_once_in_the_format_told(gunicorn_server, alice, line_format):
    server = gunicorn_server(workers=2, env={"PLANTSTORE_LOG_FORMAT": line_format})
    answers = [requests.get(server.url + "/plants", timeout=5,
                            headers={**bearer(alice), "X-Request-ID": f"once-{n}"})
               for n in range(5)]
    answers.append(requests.delete(server.url + "/plants/1", headers=bearer(alice), timeout=5))
    assert [answer.status_code for answer in answers] == [200] * 5 + [404]
    server.stop()
    lines = server.output().splitlines()
    if line_format == "text":
        assert lines and all(TEXT_LINE.fullmatch(line) for line in lines), lines
        access = [TEXT_LINE.fullmatch(line)["rest"] for line in lines
                  if TEXT_LINE.fullmatch(line)["logger"] == "gunicorn.access"]
        assert all(re.match(r"[A-Z]+ /\S* \d{3}  request_id=", rest)
                   for rest in access), access
    else:
        access = [entry["request_id"] for entry in map(json.loads, lines)
                  if entry["logger"] == "gunicorn.access"]
    for n in range(5):
        assert len([line for line in access if f"once-{n}" in line]) == 1
    assert len(set(lines)) == len(lines)  # no line written twice
    assert "Booting worker" in server.output() and alice not in server.output()
