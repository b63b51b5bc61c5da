"""Folders a command cannot write, met for real: ``db upgrade`` on SQLite
whose folder is missing, read-only or another user's, and a
``PROMETHEUS_MULTIPROC_DIR`` that exists but cannot be written. Each is one
line naming the place and what to do, never a traceback."""
import os
import subprocess
import tempfile

import pytest

from helpers import PLANTSTORE, plantstore_env
from plugins.read_only import as_another_user, read_only


def run(argv, env, cwd):
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=60)


def only_line(result):
    assert "Traceback" not in result.stderr, result.stderr
    [line] = result.stderr.splitlines()
    return line


def another_users_folder(path):
    path.mkdir()
    os.chown(path, 1234, 1234)
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("kind", ["missing", "read-only", "another user's"])
def test_db_upgrade_on_sqlite_whose_folder_cannot_hold_it_is_one_line(tmp_path, kind):
    folder = tmp_path / "data"
    argv = [PLANTSTORE, "db", "upgrade"]
    if kind == "read-only":
        folder.mkdir()
        argv = read_only([folder], argv)
    elif kind == "another user's":
        argv = as_another_user(argv)
        another_users_folder(folder)
    env = {**os.environ, **plantstore_env(f"sqlite:///{folder / 'plantstore.db'}")}
    result = run(argv, env, tmp_path)
    assert result.returncode == 1, result.stderr
    line = only_line(result)
    assert line.startswith(f"Error: the SQLite database's folder {folder} "), line
    assert {"missing": "does not exist: create it",
            "read-only": "is on a read-only file system: mount a writable volume there",
            "another user's": "is not writable by this user (uid 0): make it theirs "
                              f"(chown 0 {folder})"}[kind] in line, line
    assert result.stdout == ""


def test_db_upgrade_needs_no_temporary_directory(tmp_path):
    """A read-only root without a tmpfs on /tmp (every folder tempfile would
    try read-only): the upgrade runs, on a database in a writable folder."""
    with tempfile.TemporaryDirectory(dir="/dev/shm") as writable:
        env = {**os.environ, "TMPDIR": str(tmp_path),
               **plantstore_env(f"sqlite:///{writable}/plantstore.db")}
        result = run(read_only([tmp_path, "/tmp", "/var/tmp"], [PLANTSTORE, "db", "upgrade"]),
                     env, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "applied 0001_initial" in result.stdout


def _unwritable_metrics(tmp_path, kind, command):
    """``plantstore COMMAND``'s argv and environment with an unwritable
    ``PROMETHEUS_MULTIPROC_DIR`` of ``kind``, and that folder."""
    metrics = tmp_path / "metrics"
    argv = [PLANTSTORE, *command]
    if kind == "read-only":
        metrics.mkdir()
        argv = read_only([metrics], argv)
    else:
        another_users_folder(metrics)
        argv = as_another_user(argv)
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(metrics),
           **plantstore_env(f"sqlite:///{tmp_path / 'plantstore.db'}")}
    return argv, env, metrics


@pytest.mark.parametrize("command", [["worker", "--once"], ["web"]])
@pytest.mark.parametrize("kind", ["read-only", "another user's"])
def test_an_unwritable_metrics_directory_is_one_line_in_the_commands_that_count(
        tmp_path, command, kind):
    """The worker and the web server write their counts there: one line, exit 2."""
    argv, env, metrics = _unwritable_metrics(tmp_path, kind, command)
    result = run(argv, env, tmp_path)
    assert result.returncode == 2, result.stderr
    line = only_line(result)
    assert line.startswith("Error: PROMETHEUS_MULTIPROC_DIR must be a directory this user "
                           "can make and write ("), line
    assert line.endswith(f"not {str(metrics)!r}"), line
    assert list(metrics.iterdir()) == []


@pytest.mark.parametrize("kind", ["read-only", "another user's"])
def test_an_unwritable_metrics_directory_does_not_concern_a_command_that_counts_nothing(
        tmp_path, kind):
    """Other commands keep their counts in memory (docs/operating.md): they
    neither read the directory nor write into it."""
    upgraded = run([PLANTSTORE, "db", "upgrade"],
                   {**os.environ, **plantstore_env(f"sqlite:///{tmp_path / 'plantstore.db'}")},
                   tmp_path)
    assert upgraded.returncode == 0, upgraded.stderr
    argv, env, metrics = _unwritable_metrics(tmp_path, kind, ["users", "list"])
    result = run(argv, env, tmp_path)
    assert result.returncode == 0, result.stderr
    assert list(metrics.iterdir()) == []
