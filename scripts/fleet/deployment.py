"""The deployment on many hosts, each a network namespace of this machine:

    db        PostgreSQL 15 (a private cluster) and, in front, PgBouncer
              (transaction pooling) when the fleet runs ``through="pgbouncer"``
    redis     Redis for the rate limit counts every node shares
    web1/2    gunicorn with config/gunicorn.conf.py
    lb        nginx with config/nginx/plantstore.conf, whose upstream is
              config/nginx/upstream-two-nodes.conf
    worker1/2 ``plantstore worker``
    receiver  the recording webhook receiver (receiver.py)
    client    the load client (threads of this process, see load.py)

Everything is set up as docs/operating.md and docs/scaling.md tell an
operator: migrations with ``plantstore db upgrade``, the user, its token and
the receiver's subscription with the ``plantstore`` command. The web nodes
and workers run a release (release.py): this checkout, unless the fleet is
built on another; nginx, the receiver and the load are the test's own. The
test process watches the database through PostgreSQL's Unix socket, never
through the fleet's network.
"""
import contextlib
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg2
import requests

from .network import Network, exclusive_run, sweep
from .processes import REPO, Process, run, wait_until
from .release import CURRENT

PG_BIN = Path("/usr/lib/postgresql/15/bin")
SUBNET = os.environ.get("FLEET_SUBNET", "10.231.77")
HOSTS = {"db": 10, "redis": 11, "web1": 21, "web2": 22, "lb": 30,
         "worker1": 41, "worker2": 42, "receiver": 50, "client": 60}
WEB_NODES = ("web1", "web2")
WORKERS = ("worker1", "worker2")
EXAMPLE_NODES = {"web1": "10.0.0.21:8000", "web2": "10.0.0.22:8000"}
"""The addresses config/nginx/upstream-two-nodes.conf shows, per node."""

LEASE_SECONDS = 8
"""PLANTSTORE_WEBHOOK_LEASE_SECONDS of the fleet: short, so that a stall
longer than a lease fits in a test; twice an attempt's deadline (1 + 3 s)."""
RECEIVER_PORT = 8080
DATABASE = "plantstore"
RUN_DIR_PREFIX, RUNNING = "plantstore-fleet-", "running"
"""A run's files are in a temporary directory named so; one holding RUNNING
belongs to a run that never cleaned up (``FLEET_KEEP=1`` keeps the files of
a run that did, without it)."""


class Fleet:
    """The hosts and their processes; ``through`` is ``"direct"`` or
    ``"pgbouncer"``; web nodes and workers start on ``release``."""

    def __init__(self, through="direct", release=CURRENT):
        self.through = through
        self.release = release
        self.release_of = {}  # web node or worker -> the release it runs
        self.network = Network(SUBNET, HOSTS)
        self.dir = None
        self.processes = {}
        self.cleanups = contextlib.ExitStack()
        self.token = None
        self.socket_dir = None
        self.receiver_log = None
        self.clock_offsets = {}

    # --- addresses and environment ----------------------------------------

    def address(self, host):
        return self.network.address(host)

    def host_of(self, address):
        """The host name of a fleet address (the address itself if unknown)."""
        for host in HOSTS:
            if self.address(host) == address:
                return host
        return address

    @property
    def base_url(self):
        return f"http://{self.address('lb')}"

    def node_url(self, node):
        return f"http://{self.address(node)}:8000"

    @property
    def database_url(self):
        port = 6432 if self.through == "pgbouncer" else 5432
        return f"postgresql://postgres@{self.address('db')}:{port}/{DATABASE}"

    @property
    def receiver_url(self):
        return f"http://{self.address('receiver')}:{RECEIVER_PORT}/hooks/plants"

    def environment(self, release=None, **extra):
        """The environment every plantstore process of the fleet shares, for
        processes of ``release`` (the fleet's by default)."""
        release = release or self.release
        return {
            "PATH": f"{release.bin}:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/root", "LANG": "C.UTF-8",
            # The release's code, whichever plantstore its venv installed.
            "PYTHONPATH": str(release.tree),
            "PLANTSTORE_DATABASE_URL": self.database_url,
            "PLANTSTORE_TRUSTED_PROXIES": "1",
            "PLANTSTORE_RATE_LIMIT": "1000000/hour",
            "PLANTSTORE_RATE_LIMIT_STORAGE_URI": f"redis://{self.address('redis')}:6379/0",
            "PLANTSTORE_WEBHOOK_LEASE_SECONDS": str(LEASE_SECONDS),
            "PLANTSTORE_WEBHOOK_CONNECT_TIMEOUT": "1",
            "PLANTSTORE_WEBHOOK_READ_TIMEOUT": "3",
            # The breaker protects the fleet from a failing receiver; the
            # scenarios fail attempts on purpose and measure the queue: it
            # opens late, and once the receiver is back a probe finds it soon.
            "PLANTSTORE_WEBHOOK_BREAKER_THRESHOLD": "1000",
            "PLANTSTORE_WEBHOOK_BREAKER_COOLDOWN": "2",
            **extra,
        }

    # --- start and stop -----------------------------------------------------

    def start(self):
        """Bring the whole fleet up; on any failure, tear down what was started."""
        self.cleanups.enter_context(exclusive_run())
        sweep()  # namespaces a killed run left behind
        for stale in Path(tempfile.gettempdir()).glob(f"{RUN_DIR_PREFIX}*/{RUNNING}"):
            shutil.rmtree(stale.parent, ignore_errors=True)  # and its files
        self.dir = Path(tempfile.mkdtemp(prefix=RUN_DIR_PREFIX))
        self.dir.chmod(0o755)  # PostgreSQL and nginx's workers run as other users
        (self.dir / RUNNING).touch()
        if os.environ.get("FLEET_KEEP"):
            self.cleanups.callback(print, f"fleet logs kept in {self.dir}")
            self.cleanups.callback((self.dir / RUNNING).unlink)
        else:
            self.cleanups.callback(shutil.rmtree, self.dir, ignore_errors=True)
        self.network.create()
        self.cleanups.callback(self.network.destroy)
        try:
            self._start_database()
            self._start("redis", "redis", [
                "redis-server", "--bind", self.address("redis"), "--port", "6379",
                "--save", "", "--appendonly", "no", "--protected-mode", "no"])
            self.migrate_and_register()
            self.start_receiver("setup")
            for node in WEB_NODES:
                self.start_web(node)
            for node in WEB_NODES:
                self.wait_ready(node)
            self._start_nginx()
            for worker in WORKERS:
                self.start_worker(worker)
        except BaseException:
            self.close()
            raise
        return self

    def close(self):
        """Stop every process (at once: each gets 15 s), then remove the hosts
        and the files."""
        stopping = [threading.Thread(target=process.stop, kwargs={"timeout": 15})
                    for process in self.processes.values()]
        for thread in stopping:
            thread.start()
        for thread in stopping:
            thread.join(30)
        with contextlib.suppress(Exception):
            self._pg_ctl("stop", "-m", "immediate")
        self.cleanups.close()

    def _start(self, name, host, argv, env=None, user=None, log=None, cwd=REPO):
        if user:
            argv = ["runuser", "-u", user, "--", *argv]
        process = Process(name, self.network.command(host, argv),
                          self._log_path(log or name), env or self.environment(),
                          cwd).start()
        self.processes[name] = process
        return process

    def logs(self):
        """The tail of every process's output, for a failure's report."""
        parts = [f"--- {name} ({'running' if process.alive() else 'stopped'})\n"
                 f"{process.tail()}" for name, process in self.processes.items()]
        parts.append(f"--- postgres\n{_tail(self.dir / 'pg' / 'postgres.log')}")
        return "\n".join(parts)

    def heal(self):
        """Start again every web node and worker that is not running, and
        every worker that runs with a clock offset; wait for the nodes."""
        for node in WEB_NODES:
            if not self.processes[node].alive():
                self.start_web(node, self.release_of[node])
        for node in WEB_NODES:
            self.wait_ready(node)
        for worker in WORKERS:
            if self.clock_offsets.get(worker):
                self.stop_worker(worker)
            if not self.processes[worker].alive():
                self.start_worker(worker, release=self.release_of[worker])

    # --- PostgreSQL and PgBouncer -------------------------------------------

    def _pg_ctl(self, *args, timeout=90):
        data = self.dir / "pg" / "data"
        return run(self.network.command("db", [
            "runuser", "-u", "postgres", "--", str(PG_BIN / "pg_ctl"), "-D", str(data),
            "-l", str(self.dir / "pg" / "postgres.log"), "-w", "-t", "60", *args]),
            timeout=timeout)

    def _start_database(self):
        pg = self.dir / "pg"
        pg.mkdir()
        shutil.chown(pg, "postgres", "postgres")
        run(["runuser", "-u", "postgres", "--", str(PG_BIN / "initdb"), "-A", "trust",
             "-U", "postgres", "-D", str(pg / "data")], timeout=120)
        with open(pg / "data" / "pg_hba.conf", "a") as hba:
            hba.write(f"host all all {SUBNET}.0/24 trust\n")
        self.socket_dir = pg
        self._pg_ctl("-o", f"-c listen_addresses={self.address('db')} -p 5432 "
                     f"-k {pg} -c max_connections=200", "start")
        run(["runuser", "-u", "postgres", "--", str(PG_BIN / "createdb"), "-h", str(pg),
             "-U", "postgres", DATABASE])
        if self.through == "pgbouncer":
            self._start_pgbouncer()

    def _start_pgbouncer(self):
        bouncer = self.dir / "pgbouncer"
        bouncer.mkdir()
        (bouncer / "users.txt").write_text('"postgres" ""\n')
        (bouncer / "pgbouncer.ini").write_text(f"""\
[databases]
{DATABASE} = host={self.address('db')} port=5432 dbname={DATABASE}

[pgbouncer]
listen_addr = {self.address('db')}
listen_port = 6432
unix_socket_dir =
auth_type = trust
auth_file = {bouncer / 'users.txt'}
pool_mode = transaction
max_client_conn = 1000
default_pool_size = 40
""")
        shutil.chown(bouncer, "postgres", "postgres")
        self._start("pgbouncer", "db", ["pgbouncer", str(bouncer / "pgbouncer.ini")],
                    user="postgres")
        wait_until(lambda: self._answers_tcp("db", 6432), 30, "PgBouncer did not listen")

    def _answers_tcp(self, host, port):
        def connect():
            with socket.create_connection((self.address(host), port), timeout=1):
                return True
        try:
            return self.network.run_on("client", connect, timeout=5)
        except OSError:
            return False

    def restart_postgres(self):
        """``pg_ctl restart -m fast``: every connection is cut, then it starts again."""
        self._pg_ctl("restart", "-m", "fast")

    def connect(self):
        """A connection of the test's own to the fleet's database (Unix socket,
        straight to PostgreSQL), in autocommit."""
        connection = psycopg2.connect(host=str(self.socket_dir), dbname=DATABASE,
                                      user="postgres", connect_timeout=10)
        connection.autocommit = True
        return connection

    def query(self, sql, *params):
        """Rows of one query on a fresh connection of the test's own."""
        with contextlib.closing(self.connect()) as connection, connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()

    # --- the plantstore command -----------------------------------------------

    def plantstore(self, *args, host="web1", release=None):
        """``plantstore ARGS`` of ``release`` (the fleet's by default) run on
        ``host`` with the fleet's environment; its stdout."""
        release = release or self.release
        return run(self.network.command(host, [str(release.bin / "plantstore"), *args]),
                   env=self.environment(release), cwd=release.tree).strip()

    def migrate_and_register(self):
        """Migrations, the load's user and token, and the receiver's subscription."""
        self.plantstore("db", "upgrade")
        self.plantstore("users", "create", "fleet")
        self.token = self.plantstore("tokens", "create", "fleet")
        self.plantstore("webhooks", "add", self.receiver_url, "--bearer", "fleet-receiver")

    # --- web nodes and nginx ----------------------------------------------------

    def start_web(self, node, release=None):
        """gunicorn of ``release`` (the fleet's by default) on ``node``, in the
        release's tree; its output in ``NODE.log`` (``NODE-RELEASE.log`` for a
        release other than this checkout)."""
        release = release or self.release
        self.release_of[node] = release
        metrics = self.dir / f"{node}-metrics"
        metrics.mkdir(exist_ok=True)
        return self._start(node, node, [str(release.bin / "gunicorn"), "-c",
                                        "config/gunicorn.conf.py", "wsgi:app"],
                           env=self.environment(release, HOST=self.address(node), PORT="8000",
                                                WEB_CONCURRENCY="2",
                                                PROMETHEUS_MULTIPROC_DIR=str(metrics)),
                           log=self._log_name(node, release), cwd=release.tree)

    def _log_path(self, log):
        """Where a process started with log name ``log`` writes its output."""
        return self.dir / f"{log}.log"

    @staticmethod
    def _log_name(name, release):
        return name if release == CURRENT else f"{name}-{release.name}"

    def get(self, url, timeout=5):
        """GET ``url`` from the client host: (status, body), or (None, error)."""
        def fetch():
            with requests.Session() as session:
                session.trust_env = False
                try:
                    response = session.get(url, timeout=timeout)
                except requests.RequestException as error:
                    return None, type(error).__name__
                return response.status_code, response.text
        return self.network.run_on("client", fetch, timeout=timeout + 5)

    def wait_ready(self, node, timeout=60):
        """Wait until ``node``'s /readyz answers 200 (its process must not exit)."""
        process = self.processes[node]

        def ready():
            if not process.alive():
                raise RuntimeError(f"{node} exited:\n{process.tail()}")
            return self.get(self.node_url(node) + "/readyz", timeout=2)[0] == 200
        wait_until(ready, timeout, f"{node}'s /readyz never answered 200", interval=0.2)

    def _upstream(self, down=()):
        """config/nginx/upstream-two-nodes.conf with the fleet's addresses,
        the nodes in ``down`` marked ``down``."""
        text = (REPO / "config/nginx/upstream-two-nodes.conf").read_text()
        for node, example in EXAMPLE_NODES.items():
            # docs/scaling.md's edit: " down" before the line's ";".
            line = re.compile(rf"^(\s*server {re.escape(example)}[^;]*);", re.MULTILINE)
            text, found = line.subn(
                r"\1 down;" if node in down else r"\g<0>", text)
            if found != 1:
                raise RuntimeError(f"upstream-two-nodes.conf has no server line for {example}")
            text = text.replace(example, f"{self.address(node)}:8000")
        return text

    def _start_nginx(self):
        conf = self.dir / "nginx"
        conf.mkdir()
        site = (REPO / "config/nginx/plantstore.conf").read_text()
        site, found = re.subn(r"^upstream plantstore \{.*?^\}\n",
                              f"include {conf}/upstream.conf;\n", site,
                              flags=re.MULTILINE | re.DOTALL)
        if found != 1:
            raise RuntimeError("config/nginx/plantstore.conf has no upstream block")
        site = (site.replace("listen 80;", f"listen {self.address('lb')}:80;")
                .replace("/var/log/nginx/plantstore.access.log", f"{conf}/access.log"))
        (conf / "plantstore.conf").write_text(site)
        (conf / "upstream.conf").write_text(self._upstream())
        (conf / "nginx.conf").write_text(f"""\
worker_processes 1;
pid {conf}/nginx.pid;
error_log {conf}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    default_type application/octet-stream;
    client_body_temp_path {conf}/client_body;
    proxy_temp_path {conf}/proxy;
    fastcgi_temp_path {conf}/fastcgi;
    uwsgi_temp_path {conf}/uwsgi;
    scgi_temp_path {conf}/scgi;
    include {conf}/plantstore.conf;
}}
""")
        self.nginx_args = ["nginx", "-p", str(conf), "-e", f"{conf}/error.log",
                           "-c", f"{conf}/nginx.conf"]
        run(self.network.command("lb", [*self.nginx_args, "-t", "-q"]))
        self._start("nginx", "lb", [*self.nginx_args, "-g", "daemon off;"])
        wait_until(lambda: self.get(self.base_url + "/healthz")[0] == 200, 30,
                   "nginx did not answer")

    def set_upstream(self, down=()):
        """Write the upstream with ``down`` marked down, reload nginx (``nginx
        -t``, then SIGHUP to its master, as ``systemctl reload nginx``) and
        wait until the workers it had have ended: their requests are answered
        and every request from now on sees the new upstream."""
        before = self.nginx_workers()
        (self.dir / "nginx" / "upstream.conf").write_text(self._upstream(down))
        run(self.network.command("lb", [*self.nginx_args, "-t", "-q"]))
        self.processes["nginx"].popen.send_signal(signal.SIGHUP)
        wait_until(lambda: not set(before) & set(self.nginx_workers(shutting_down=True))
                   and self.nginx_workers(), 60, "nginx's old workers did not finish",
                   interval=0.05)

    def nginx_workers(self, shutting_down=False):
        """Pids of the fleet's nginx workers that serve (with ``shutting_down``:
        of every worker, those finishing their last requests after a reload too)."""
        return [pid for pid, title in children(self.processes["nginx"].pid, titles=True)
                if "worker process" in title
                and (shutting_down or "shutting down" not in title)]

    def restart_node(self, node, release=None):
        """docs/scaling.md's rolling restart of one web node, step by step,
        onto ``release`` (the one it runs by default); the seconds each step
        took."""
        release = release or self.release_of[node]
        steps, began = {}, time.monotonic()

        def done(step):
            nonlocal began
            steps[step] = round(time.monotonic() - began, 2)
            began = time.monotonic()
        # 1. Out of nginx's upstream (`down`), nginx reloaded, and 2. nginx's
        #    old workers have ended: their requests to the node are answered
        #    and nothing more will reach it.
        self.set_upstream(down={node})
        done("out of nginx")
        # 3. `systemctl restart plantstore-web`: SIGTERM to gunicorn's master
        #    (KillMode=mixed), which lets requests in flight finish; SIGKILL
        #    after TimeoutStopSec=45; then start it again.
        status = self.processes[node].stop_main(timeout=45)
        if status != 0:
            raise RuntimeError(f"{node}'s gunicorn did not stop gracefully: exit {status}")
        done("stopped")
        #    The unit's ExecStartPre, `plantstore db upgrade --expand`, finds
        #    nothing left once step 1 ran: only gunicorn starts here.
        self.start_web(node, release)
        # 4. Its /readyz answers 200.
        self.wait_ready(node)
        done("started and ready")
        # 5. Back in nginx's upstream, nginx reloaded.
        self.set_upstream(down=())
        done("back in nginx")
        return steps

    def creates_served(self):
        """``POST /plants`` lines in the access log of each web node's process so far."""
        return {node: creates_in_log(self.processes[node].log_path) for node in WEB_NODES}

    # --- workers and the receiver -----------------------------------------------

    def start_worker(self, name, clock_offset=None, release=None):
        """``plantstore worker`` of ``release`` (the fleet's by default) on
        host ``name``; with its wall clock off by ``clock_offset``
        (``faketime -f``'s, e.g. ``+120s``) when one is given (see
        wall_clock_off.py: this checkout's code only). Returns once the
        worker says it started (its first claim follows at once): a
        scenario's load never runs while a worker is still importing."""
        self.clock_offsets[name] = clock_offset
        release = release or self.release
        self.release_of[name] = release
        if not clock_offset:
            argv, env = [str(release.bin / "plantstore"), "worker"], self.environment(release)
            log, cwd = self._log_name(name, release), release.tree
        else:
            argv = ["faketime", "-f", clock_offset, sys.executable,
                    str(Path(__file__).with_name("wall_clock_off.py")), "worker"]
            env, log, cwd = self.environment(FAKETIME_DONT_FAKE_MONOTONIC="1"), None, REPO
        log_path = self._log_path(log or name)
        written_before = log_path.stat().st_size if log_path.exists() else 0
        process = self._start(name, name, argv, env=env, log=log, cwd=cwd)

        def started():
            with open(log_path, "rb") as output:
                output.seek(written_before)
                return b"webhook worker started" in output.read() or not process.alive()
        wait_until(started, 60, f"{name} never said it started", interval=0.05)
        if not process.alive():
            raise RuntimeError(f"{name} exited:\n{process.tail()}")
        return process

    def stop_worker(self, name):
        return self.processes[name].stop(timeout=30)

    def restart_worker(self, name, release=None):
        """A worker restarted as ``systemctl restart plantstore-worker`` does,
        onto ``release`` (the one it runs by default): SIGTERM, the attempts
        under way end and are recorded, it exits (SIGKILL after the unit's
        TimeoutStopSec=180), then it starts again; the seconds it took to stop."""
        began = time.monotonic()
        status = self.processes[name].stop_main(timeout=180)
        if status != 0:
            raise RuntimeError(f"{name} did not stop gracefully: exit {status}")
        stopped = time.monotonic() - began
        self.start_worker(name, release=release or self.release_of[name])
        return round(stopped, 2)

    def start_receiver(self, label, delay=None, fail_first=False):
        """A fresh receiver recording into ``received-<label>.jsonl``."""
        if "receiver" in self.processes:
            self.processes["receiver"].stop(timeout=10)
        self.receiver_log = self.dir / f"received-{label}.jsonl"
        argv = [sys.executable, str(Path(__file__).with_name("receiver.py")),
                f"{self.address('receiver')}:{RECEIVER_PORT}", str(self.receiver_log)]
        if delay:
            argv += ["--delay", f"{delay[0]}:{delay[1]}"]
        if fail_first:
            argv.append("--fail-first")
        process = self._start("receiver", "receiver", argv, log=f"receiver-{label}")
        wait_until(lambda: "listening" in process.tail() or not process.alive(), 30,
                   "the receiver did not start", interval=0.05)
        if not process.alive():
            raise RuntimeError(f"the receiver exited:\n{process.tail()}")
        return process

    def stop_receiver(self):
        self.processes["receiver"].stop(timeout=10)

    # --- the queue, as the database sees it -----------------------------------

    def deliveries_by_status(self):
        return dict(self.query("SELECT status, count(*) FROM delivery GROUP BY status"))

    def pending(self):
        return self.deliveries_by_status().get("pending", 0)

    def wait_queue_empty(self, timeout):
        """Wait until no delivery is pending; returns the counts by status."""
        wait_until(lambda: self.pending() == 0, timeout,
                   f"deliveries still pending: {self.deliveries_by_status()}", interval=0.2)
        return self.deliveries_by_status()


def children(parent, titles=False):
    """Pids of ``parent``'s child processes (with ``titles``: (pid, title) pairs)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            title = (entry / "cmdline").read_bytes().decode(errors="replace") if titles else ""
        except OSError:
            continue
        if ppid == parent:
            found.append((int(entry.name), title) if titles else int(entry.name))
    return found


def creates_in_log(path):
    """``POST /plants`` lines in a web node's access log."""
    text = Path(path).read_text(errors="replace")
    return sum('"method": "POST", "path": "/plants"' in line for line in text.splitlines())


def _tail(path, lines=25):
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return ""

