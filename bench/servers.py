"""The servers a benchmark drives: plantstore under its own gunicorn config,
and the yardsticks (bare-WSGI ceiling, FastAPI peer), each a process group
on a free loopback port whose workers can be found and measured."""
import os
import runpy
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import cpu

REPO = Path(__file__).resolve().parents[1]
GUNICORN_CONF = REPO / "config" / "gunicorn.conf.py"
WORKERS = 2


def free_port():
    """A TCP port on loopback that nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def gunicorn_worker_settings():
    """(worker_class, threads, reuse_port) that config/gunicorn.conf.py chooses.

    Reading the config runs it, and it sets up a metrics directory in the
    environment: the environment is put back as it was, so no later
    process inherits a directory a gunicorn server will remove.
    """
    saved = dict(os.environ)
    try:
        conf = runpy.run_path(str(GUNICORN_CONF))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return (conf.get("worker_class", "sync"), int(conf.get("threads", 1)),
            bool(conf.get("reuse_port")))


class Server:
    """One server process group, its log file, its port and its workers."""

    def __init__(self, name, argv, env, cwd, log_dir, probe_path="/plants", workers=WORKERS,
                 serves_itself=False):
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.argv = [arg.format(port=self.port) for arg in argv]
        self.env = {**os.environ, **env, "PORT": str(self.port)}
        self.cwd = cwd
        self.log_path = Path(log_dir) / f"{name}.log"
        self.probe_path = probe_path
        self.workers = workers
        self.serves_itself = serves_itself  # no worker processes: it serves
        self.process = None

    def start(self, seconds=60):
        """Start the server and wait until every worker is up and it answers."""
        self.log = open(self.log_path, "wb")
        self.process = subprocess.Popen(self.argv, cwd=self.cwd, env=self.env,
                                        stdout=self.log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited; see {self.log_path}")
            if len(self.worker_pids()) >= self.workers and self._answers():
                return self
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} did not come up in {seconds}s; see {self.log_path}")

    def _answers(self):
        """True once the server answers HTTP at its probe path."""
        try:
            urllib.request.urlopen(self.url + self.probe_path, timeout=2)
        except urllib.error.HTTPError:
            return True  # an answer (401 without a token) is an answer
        except OSError:
            return False
        return True

    def worker_pids(self):
        """The pids of the serving worker processes (children of the master)."""
        pid = self.process.pid
        if self.serves_itself:
            return [pid]
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text()
        except OSError:
            return []
        pids = [int(pid) for pid in children.split()]
        # uvicorn's supervisor starts a resource tracker besides its workers.
        return [pid for pid in pids if b"resource_tracker" not in _cmdline(pid)]

    def cpu_seconds(self):
        """User + system CPU seconds of the master and its workers so far."""
        return cpu.tree_cpu_seconds(self.process.pid)

    def worker_cpu_seconds(self):
        """{pid: user + system CPU seconds so far} of each serving worker."""
        return {pid: cpu.tree_cpu_seconds(pid) for pid in self.worker_pids()}

    def worker_rss_kib(self):
        """{pid: VmRSS in KiB} of each worker."""
        return {pid: rss for pid in self.worker_pids() if (rss := vm_rss_kib(pid)) is not None}

    def stop(self):
        """Stop the whole process group, gracefully first."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.log.close()


def _cmdline(pid):
    """The command line of ``pid`` (empty when it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def vm_rss_kib(pid):
    """Resident set size of ``pid`` in KiB, from /proc/<pid>/status."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def plantstore(database_url, log_dir, venv_bin, name="plantstore", env=None, checkout=REPO,
               workers=WORKERS):
    """plantstore under gunicorn with the project's own config and ``workers``
    processes, served from ``checkout`` (another working tree: its config
    and its package)."""
    checkout = Path(checkout)
    return Server(
        name,
        [str(venv_bin / "gunicorn"), "-c", str(checkout / GUNICORN_CONF.relative_to(REPO)),
         "wsgi:app"],
        {"PLANTSTORE_DATABASE_URL": database_url, "WEB_CONCURRENCY": str(workers),
         **(env or {})},
        checkout, log_dir, workers=workers)


def ceiling(yardsticks, database_url, log_dir, venv_bin, name="ceiling", app="ceiling:app",
            env=None, workers=WORKERS):
    """ceiling.py (or ``app``, another WSGI app using its connections) under
    gunicorn on ``database_url`` (sqlite:/// or postgresql://), served from
    the yardsticks' directory: as many workers, the same worker class,
    threads and listening sockets as plantstore (it keeps one connection per
    thread)."""
    worker_class, threads, reuse_port = gunicorn_worker_settings()
    return Server(
        name,
        [str(venv_bin / "gunicorn"), "-w", str(workers), "-k", worker_class,
         "--threads", str(threads), "-b", "127.0.0.1:{port}", app]
        + (["--reuse-port"] if reuse_port else []),
        {"CEILING_DATABASE_URL": database_url, **(env or {})}, yardsticks, log_dir,
        workers=workers)


def peer(yardsticks, database_url, log_dir, bench_venv_bin, name="fastapi-peer",
         workers=WORKERS):
    """peer_fastapi.py under uvicorn with as many worker processes (an ASGI
    app: gunicorn's gthread worker cannot serve it); with one, uvicorn
    serves in its own process."""
    return Server(
        name,
        [str(bench_venv_bin / "uvicorn"), "--workers", str(workers), "--host", "127.0.0.1",
         "--port", "{port}", "peer_fastapi:app"],
        {"CEILING_DATABASE_URL": database_url}, yardsticks, log_dir, workers=workers,
        serves_itself=workers == 1)
