"""The web server on a read-only root without a tmpfs on /tmp (as ``docker
run --read-only`` alone): every folder tempfile would use is bound read-only
in a mount namespace of the server's own. It serves, keeping its temporary
files in /dev/shm; with /dev/shm read-only too, one line says what to mount."""
import glob
import os
import signal
import subprocess
import tempfile

import pytest
import requests

from helpers import (
    PLANTSTORE,
    REPO,
    free_port,
    plantstore_env,
    process_group_killed_after,
    run_plantstore,
)
from plugins.read_only import read_only
from plugins.servers import wait_until_up

TEMPORARY_FOLDERS = ["/tmp", "/var/tmp", REPO]
"""Where tempfile looks when TMPDIR is unusable (the working directory last)."""


def server_env(tmp_path, database_url):
    env = {**os.environ, **plantstore_env(database_url), "PORT": str(free_port()),
           "WEB_CONCURRENCY": "1", "TMPDIR": str(tmp_path), "PLANTSTORE_LOG_FORMAT": "json"}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    return env


@pytest.mark.slow
def test_the_web_server_serves_on_a_read_only_root_without_a_tmpfs_on_tmp(tmp_path):
    before = set(glob.glob("/dev/shm/plantstore-metrics-*"))
    with tempfile.TemporaryDirectory(dir="/dev/shm") as writable:
        env = server_env(tmp_path, f"sqlite:///{writable}/plantstore.db")
        assert run_plantstore("db", "upgrade", env=env).returncode == 0
        log = tmp_path / "web.log"
        with log.open("wb") as output:
            server = subprocess.Popen(
                read_only([tmp_path, *TEMPORARY_FOLDERS], [PLANTSTORE, "web"]), cwd=REPO,
                env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        url = f"http://127.0.0.1:{env['PORT']}"
        with process_group_killed_after(server):
            wait_until_up(f"{url}/healthz", server)
            assert requests.get(f"{url}/healthz", timeout=5).status_code == 200
            scrape = requests.get(f"{url}/metrics", timeout=5)
            assert scrape.status_code == 200
            assert 'plantstore_http_requests_total{method="GET",route="/healthz"' in scrape.text
            server.send_signal(signal.SIGTERM)
            assert server.wait(timeout=60) == 0, log.read_text()
    assert "Traceback" not in log.read_text()
    assert set(glob.glob("/dev/shm/plantstore-metrics-*")) == before  # removed at the stop


@pytest.mark.slow
def test_without_any_writable_temporary_folder_the_web_server_says_what_to_mount(tmp_path):
    env = server_env(tmp_path, f"sqlite:///{tmp_path / 'plantstore.db'}")
    result = subprocess.run(
        read_only([tmp_path, *TEMPORARY_FOLDERS, "/dev/shm"], [PLANTSTORE, "web"]),
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [
        "Error: no writable temporary directory (TMPDIR, /tmp, /var/tmp, /dev/shm): mount a "
        "tmpfs on /tmp (docker run --tmpfs /tmp) or set TMPDIR to a writable directory"]
