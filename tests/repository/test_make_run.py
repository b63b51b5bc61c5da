"""`make run` for real, in a checkout of its own: the API and one webhook
worker with one environment, on 127.0.0.1, told once; Ctrl-C stops both.
And docs/webhooks.md's walkthrough of a receiver on this machine, run as
written against real processes."""
import json
import os
import re
import shutil
import socket
import time

import pytest
import requests

from helpers import (
    POSTGRES_URL,
    bearer,
    free_port,
    plantstore_env,
    run_plantstore,
    system_program_missing,
    wait_until,
)
from plantstore.db import MIGRATIONS_DIR
from plugins.local_run import (
    STOP_SECONDS,
    Terminal,
    code_blocks,
    group_alive,
    newcomer_env,
    session,
    started_pids,
)

pytestmark = pytest.mark.slow

WALKTHROUGH = "## A receiver on your own machine, in two minutes"


@pytest.fixture
def curl():
    """The docs' sessions run curl as written."""
    if shutil.which("curl") is None:
        system_program_missing("curl is missing (apt-get install curl)")


@pytest.fixture
def database_env(request, database_url):
    """The variables putting `make run` on the test's database: on PostgreSQL
    the suite's, emptied first (by the ``app`` fixture); on SQLite none, so
    `make run` makes its own default (plantstore.db in the checkout), as a
    newcomer gets it."""
    if not POSTGRES_URL:
        return {}
    request.getfixturevalue("app")
    return {"PLANTSTORE_DATABASE_URL": database_url}


def stop_and_check_everything_ended(run):
    """Ctrl-C `make run` (typed on its terminal, or SIGINT to its process
    group as a terminal sends it); both processes of the Procfile, and what
    they started, are gone within ``STOP_SECONDS``, and make took it for a
    clean end (no ``make: ***`` line)."""
    pids = started_pids(run.output())
    assert set(pids) == {"web.1", "worker.1"}, run.output()
    began = time.monotonic()
    if isinstance(run, Terminal):
        run.ctrl_c()
    else:
        run.interrupt()
    for name, pid in pids.items():  # honcho starts each in a process group of its own
        wait_until(lambda pid=pid: not group_alive(pid), STOP_SECONDS - (time.monotonic() - began),
                   interval=0.05, message=f"{name}'s processes to end")
    assert not group_alive(run.process.pid)
    for name in pids:  # each stopped gracefully, by itself
        run.wait_for_output(rf"{re.escape(name)} stopped \(rc=0\)", timeout=10)
    assert "make: ***" not in run.output(), run.output()[-3000:]


def test_make_run_serves_on_loopback_delivers_with_its_worker_and_ctrl_c_stops_both(
        checkout, background, make_receiver, database_url, database_env):
    port = free_port()
    env = newcomer_env(PORT=str(port), PLANTSTORE_WEBHOOK_ALLOWED_NETWORKS="127.0.0.0/8",
                       **database_env)
    run = background("make run", checkout, env)
    run.wait_for_output(r"worker\.1 +\| .*webhook worker started")
    run.wait_for_output(rf"Listening at: http://127\.0\.0\.1:{port} ")
    output = run.output()
    assert f"plantstore on http://127.0.0.1:{port} with one webhook worker" in output
    assert "tokens create alice" in output
    assert "echo PLANTSTORE_WEBHOOK_ALLOWED_NETWORKS=127.0.0.0/8 >> .env, then make run" in output
    migrations = [name[:-3] for name in os.listdir(MIGRATIONS_DIR)
                  if re.fullmatch(r"\d{4}_\w+\.py", name)]
    assert all(output.count(name) <= 1 for name in migrations), output
    if not POSTGRES_URL:  # a fresh database: each migration applied, and told once
        assert all(f"applied {name}" in output for name in migrations), output

    cli_env = {**os.environ, **plantstore_env(database_url if POSTGRES_URL
                                              else f"sqlite:///{checkout / 'plantstore.db'}")}
    assert run_plantstore("users", "create", "alice", env=cli_env).returncode == 0
    token = run_plantstore("tokens", "create", "alice", env=cli_env).stdout.strip()
    receiver = make_receiver()
    url = f"http://127.0.0.1:{port}"
    registered = requests.post(f"{url}/webhooks", json={"url": receiver.url},
                               headers=bearer(token), timeout=10)
    assert registered.status_code == 201, registered.text
    # Test events are sent by the worker only, which checks the address again
    # under its own settings: it got make run's environment.
    test_event = requests.post(f"{url}/webhooks/{registered.json()['id']}/test",
                               headers=bearer(token), timeout=10)
    assert test_event.status_code == 202
    (received,) = receiver.wait_for(1)
    assert json.loads(received.body)["tag"] == "test"

    stop_and_check_everything_ended(run)
    assert "webhook worker stopped" in run.output()  # each stopped gracefully
    assert "Shutting down: Master" in run.output()
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{url}/healthz", timeout=5)


def test_make_run_in_a_terminal_writes_text_log_lines_and_stops_on_ctrl_c(
        checkout, terminal, database_env):
    port = free_port()
    env = newcomer_env(PORT=str(port), **database_env)
    run = terminal("make run", checkout, env)  # honcho colours its prefixes there
    run.wait_for_output(r"worker\.1 +\| .*webhook worker started")
    line = run.wait_for_output(r"web\.1 +\| (?:\x1b\[0m)?(.*Listening at: .*)")[1]
    assert re.match(r"\d{4}-\d\d-\d\dT[\d:.]+Z \[\d+\] INFO +gunicorn\.error: "
                    r"Listening at: http://127\.0\.0\.1:", line), line
    stop_and_check_everything_ended(run)
    assert "webhook worker stopped" in run.output()


def test_make_run_on_a_taken_port_says_so_in_one_line(checkout, background, database_env):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = background("make run", checkout, newcomer_env(PORT=str(port), **database_env))
        assert run.process.wait(timeout=120) != 0
    output = run.output()
    said = re.findall(r"web\.1 +\| (.*)", output)
    assert said[0] == (f"Error: PORT {port} on 127.0.0.1 cannot be listened on, another "
                       "program listens there: stop it, or set another PORT (e.g. PORT=8001 "
                       "make run)"), output
    assert "Connection in use" not in output and "Traceback" not in output, output


def test_the_local_receiver_walkthrough_runs_as_written(
        checkout, background, shell, database_env, curl):
    blocks = code_blocks("webhooks.md", WALKTHROUGH, "sh")
    assert [block.splitlines()[0].split(":")[0].split(",")[0] for block in blocks] == [
        "# shell 1", "# shell 2", "# shell 3", "# shell 2 again", "# shell 2 again",
        "# shell 2 again", "# shell 2 again"]
    assert all("8000" in block or "9000" in block for block in blocks[1:5])
    # The doc's ports are make run's default (8000) and the receiver's 9000;
    # this test serves on free ones, as the doc says to for other ports.
    ports = {"8000": str(free_port()), "9000": str(free_port())}

    def on_free_ports(block):
        """The block with this test's free ports for the doc's 8000 and 9000."""
        return re.sub(r"\b(8000|9000)\b", lambda match: ports[match[1]], block)

    env = newcomer_env(**database_env)  # the setting comes from .env, as the doc says
    service = background(blocks[0], checkout, {**env, "PORT": ports["8000"]})
    service.wait_for_output(r"worker\.1 +\| .*webhook worker started")
    service.wait_for_output(r"Listening at: http://127\.0\.0\.1:")

    second = shell(checkout, env)
    printed, status = second.run(on_free_ports(blocks[1]))
    assert status == 0, printed
    subscription = json.loads((checkout / "webhook.json").read_text())
    assert subscription["secret"].startswith("whsec_") and subscription["active"]

    receiver = background(on_free_ports(blocks[2]), checkout, env)
    receiver.wait_for_output(rf"receiving webhooks on http://127\.0\.0\.1:{ports['9000']}/")

    printed, status = second.run(on_free_ports(blocks[3]))
    assert status == 0, printed
    answers = [json.loads(line) for line in printed.splitlines() if line.strip()]
    assert [answers[0]["event"], answers[1]] == ["plant.test", {"name": "Ivy"}]

    test_event = receiver.wait_for_output(r"POST /plants webhook-id=msg_\w+ signature verified: "
                                          r"(\{\"id\": 0, .*\"tag\": \"test\"\})")
    assert json.loads(test_event[1])["name"] == "Example plant (a test event from plantstore)"
    receiver.wait_for_output(r"POST /plants webhook-id=msg_\w+ signature verified: "
                             r"\{\"id\": 7, \"name\": \"Ivy\"\}")
    assert "NOT verified" not in receiver.output()

    def both_listed_delivered():
        """The doc's deliveries listing, once it shows both delivered (each
        outcome is written a moment after the receiver's answer)."""
        listed, status = second.run(
            f'curl -s localhost:{ports["8000"]}/webhooks/$ID/deliveries '
            '-H "Authorization: Bearer $TOKEN"')
        assert status == 0
        return [delivery["status"] for delivery in json.loads(listed)] == ["delivered"] * 2
    wait_until(both_listed_delivered, timeout=30, interval=0.2,
               message="both deliveries listed as delivered")

    receiver.interrupt()  # Ctrl-C in shell 3
    printed, status = second.run(on_free_ports(blocks[4]))
    assert (status, json.loads(printed)) == (0, {"name": "Moss"}), printed

    def waiting_after_two_refused_attempts():
        """The doc's listing of deliveries waiting for a retry, once plant 8's
        shows the web server's attempt and the worker's first retry."""
        listed, status = second.run(blocks[5])
        assert status == 0, listed
        rows = [line.split("\t") for line in listed.splitlines() if line.strip()]
        return len(rows) == 1 and rows[0][4] == "2" and rows[0]
    waiting = wait_until(waiting_after_two_refused_attempts, timeout=60, interval=0.5,
                         message="plant 8's delivery waiting after two attempts")
    assert waiting[5].endswith("last error: connection refused"), waiting

    receiver = background(on_free_ports(blocks[2]), checkout, env)  # shell 3's command again
    receiver.wait_for_output(rf"receiving webhooks on http://127\.0\.0\.1:{ports['9000']}/")
    printed, status = second.run(on_free_ports(blocks[6]))
    assert status == 0 and re.fullmatch(r"delivered msg_\w+", printed.strip()), printed
    receiver.wait_for_output(r"POST /plants webhook-id=msg_\w+ signature verified: "
                             r"\{\"id\": 8, \"name\": \"Moss\"\}")
    listed, _ = second.run(f'curl -s localhost:{ports["8000"]}/webhooks/$ID/deliveries '
                           '-H "Authorization: Bearer $TOKEN"')
    errors = {attempt.get("error") for delivery in json.loads(listed)
              for attempt in delivery["attempts"]}
    assert errors == {None, "connection refused"}, listed  # none refused by the address policy

    receiver.interrupt()
    stop_and_check_everything_ended(service)


def shows(printed, shown):
    """Whether ``printed`` is what the doc ``shown``: line for line, where a
    ``...`` line stands for any lines (the shown ones stay in order)."""
    lines = [line.rstrip("\r") for line in printed.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    if "..." not in shown:
        return lines == shown
    remaining = iter(lines)
    return all(any(line == wanted for line in remaining) for wanted in shown if wanted != "...")


def test_the_readme_curl_session_is_true_character_for_character(
        checkout, background, shell, database_env, curl):
    (block,) = code_blocks("README.md", "## A curl session", "sh")
    steps = session(block)
    assert sum(bool(shown) for _, shown in steps) == 5
    port = str(free_port())
    env = newcomer_env(**database_env)
    service = background("make run", checkout, {**env, "PORT": port})
    service.wait_for_output(r"Listening at: http://127\.0\.0\.1:")

    second = shell(checkout, env)
    for command, shown in steps:
        printed, status = second.run(re.sub(r"\blocalhost:8000\b", f"localhost:{port}", command))
        assert status == 0, (command, printed)
        if shown:
            assert shows(printed, shown), (command, printed, shown)
    stop_and_check_everything_ended(service)
