"""A command whose counts no ``/metrics`` serves writes no file into a shared
``PROMETHEUS_MULTIPROC_DIR`` (one per run would slow every scrape); the
worker's counts are kept there, for the web's scrape to add up."""
import os
import subprocess

import pytest

from helpers import PLANTSTORE, REPO, plantstore_env


def run(*args, env):
    """Run ``plantstore ARGS``; its pid and the finished process."""
    process = subprocess.Popen([str(PLANTSTORE), *args], cwd=REPO, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    return process.pid, stdout


@pytest.fixture
def command_env(tmp_path, database_url, app):
    """The variables of a command on the test's (migrated) database, with a
    metrics directory of its own."""
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    return metrics, {**os.environ, **plantstore_env(database_url),
                     "PROMETHEUS_MULTIPROC_DIR": str(metrics)}


@pytest.mark.slow
def test_commands_that_serve_nothing_leave_no_metric_file(command_env):
    metrics, env = command_env
    for command in (("users", "create", "carol"), ("tokens", "create", "carol"),
                    ("webhooks", "list"), ("deliveries", "summary"), ("db", "status"),
                    ("keys", "generate"), ("--help",)):
        pid, _ = run(*command, env=env)
        assert not [name for name in os.listdir(metrics) if str(pid) in name], command
    assert os.listdir(metrics) == []


@pytest.mark.slow
def test_the_worker_keeps_its_counts_in_the_shared_directory(command_env):
    metrics, env = command_env
    pid, stdout = run("worker", "--once", env=env)
    assert stdout.strip() == "nothing due"
    assert f"counter_{pid}.db" in os.listdir(metrics)
