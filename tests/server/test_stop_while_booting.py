"""A Ctrl-C that reaches gunicorn while its workers boot (as ``make run``
in a terminal, stopped at once) ends it with status 0 and no traceback.

The terminal sends SIGINT to the whole process group: the master and each
worker, wherever its boot is. The race is narrow, so the test plays it many
times; the hook alone is driven on each worker class in
``tests/repository/test_deploy.py``.
"""
import os
import signal

import pytest

from helpers import process_group_killed_after, wait_until
from plugins.servers import Gunicorn

TRIES = 12


def ctrl_c_as_the_workers_boot(database_url):
    """Start gunicorn with four workers, send its process group a SIGINT once
    the first worker boots: (its exit status, what it wrote)."""
    server = Gunicorn(database_url, workers=4).launch()
    process = server.process
    with process_group_killed_after(process):
        wait_until(lambda: "Booting worker" in server.output() or process.poll() is not None,
                   timeout=30, interval=0.005, message=server.output)
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=30)
    return process.returncode, server.output()


@pytest.mark.slow
def test_a_ctrl_c_as_the_workers_boot_ends_gunicorn_with_status_0_and_no_traceback(
        app, database_url):
    for _ in range(TRIES):
        status, said = ctrl_c_as_the_workers_boot(database_url)
        assert status == 0 and "Traceback" not in said, said[-6000:]
