"""The webhook measurements of ``make bench``: the fuse (creates while a
receiver hangs) and the worker's drain rate.

The fuse: POST /plants under wrk for BENCH_FUSE_SECONDS (15) with no
subscription, with one healthy receiver and with one that accepts and never
answers, while a probe reads /healthz and GET /plants?limit=10; then the
receiver is made healthy, workers drain the outbox, and every plant must
have been delivered (the receiver counts distinct webhook-ids).

The worker: BENCH_WORKER_DELIVERIES (5,000) deliveries due at once to a fast
keep-alive receiver, drained by one and by two ``plantstore worker``
processes, on each backend BENCH_DATABASE names (throwaway databases, see
databases.py). The rate is counted from the first delivery to the last
(process start-up excluded), and so is the workers' CPU per delivery (user +
system time of their processes, from /proc: see cpu.py), the steadier figure
on a shared machine.
"""
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

import cpu
import seed
import servers

RECEIVER = Path(__file__).with_name("receiver.py")
# The bench's processes see each other's breakers quickly; everything else
# is the defaults.
ENV = {"PLANTSTORE_WEBHOOK_BREAKER_COOLDOWN": "1", "PLANTSTORE_WORKER_POLL_INTERVAL": "0.2"}


class Receiver:
    """bench/receiver.py on a port of its own (``hang``: never answers)."""

    def __init__(self, port, hang=False):
        self.port = port
        self.url = f"http://127.0.0.1:{port}/hook"
        argv = [sys.executable, str(RECEIVER), str(port)] + (["--hang"] if hang else [])
        self.process = subprocess.Popen(argv, start_new_session=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                self.counts()
                return
            except requests.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError("the bench receiver did not start")

    def counts(self):
        """(POSTs received, distinct webhook-ids)."""
        posts, ids = requests.get(f"http://127.0.0.1:{self.port}/", timeout=5).text.split()
        return int(posts), int(ids)

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=10)


def plantstore(venv_bin, *args, url, check=True):
    """Run a ``plantstore`` command on ``url`` (its stderr in the error if it fails)."""
    done = subprocess.run([str(venv_bin / "plantstore"), *args], capture_output=True,
                          text=True, timeout=300,
                          env={**os.environ, **ENV, "PLANTSTORE_DATABASE_URL": url})
    if check and done.returncode:
        raise RuntimeError(f"plantstore {' '.join(args)} failed: {done.stderr.strip()}")
    return done


class Probe(threading.Thread):
    """Reads /healthz and GET /plants?limit=10 in turn, timing each."""

    def __init__(self, base_url, token):
        super().__init__(daemon=True)
        self.base_url, self.token = base_url, token
        self.timings = {"/healthz": [], "/plants?limit=10": []}
        self.done = threading.Event()

    def run(self):
        with requests.Session() as session:
            while not self.done.is_set():
                for path, timings in self.timings.items():
                    started = time.monotonic()
                    session.get(self.base_url + path, timeout=60,
                                headers={"Authorization": f"Bearer {self.token}"})
                    timings.append((time.monotonic() - started) * 1000)
                time.sleep(0.02)

    def p99_ms(self):
        return {path: statistics.quantiles(t, n=100)[98] if len(t) > 1 else float("nan")
                for path, t in self.timings.items()}


def drain(venv_bin, url, seconds=300):
    """Run ``worker --once`` until nothing is pending (bounded in time)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if "nothing due" in plantstore(venv_bin, "worker", "--once", url=url).stdout:
            if not _pending(url):
                return
            time.sleep(0.5)  # a breaker's next probe


def _pending(url):
    from plantstore import create_app
    from plantstore.db import database
    from plantstore.models import Delivery
    create_app({"DATABASE_URL": url})
    with database.connection_context():
        pending = Delivery.select().where(Delivery.status == Delivery.PENDING).count()
    database.close_all()
    return pending


def measure_fuse(runner, workdir, started, venv_bin, seconds):
    """Create throughput with no receiver, a healthy one and a hanging one."""
    results = {}
    for case in ("none", "healthy", "hanging"):
        url = f"sqlite:///{workdir}/fuse-{case}.db"
        token = seed.seed_plantstore(url, 1000)
        port = servers.free_port()
        receiver = Receiver(port, hang=case == "hanging") if case != "none" else None
        if receiver:
            plantstore(venv_bin, "webhooks", "add", receiver.url, url=url)
        server = servers.plantstore(url, workdir, venv_bin, name=f"plantstore-fuse-{case}",
                                    env=ENV)
        started.append(server)
        server.start()
        probe = Probe(server.url, token)
        probe.start()
        print(f"fuse: POST /plants for {seconds}s, receiver {case}", flush=True)
        result = runner.run(_contender(server, token), None, seconds=seconds)
        probe.done.set()
        probe.join()
        server.stop()
        results[case] = {"rps": result.rps, "p50": result.p50_ms, "created": result.requests,
                         **{f"p99 {path}": ms for path, ms in probe.p99_ms().items()}}
        if receiver:
            if case == "hanging":
                receiver.stop()
                receiver = Receiver(port)
            drain(venv_bin, url)
            posts, distinct = receiver.counts()
            receiver.stop()
            results[case].update(posts=posts, delivered=distinct)
        print(f"  {results[case]}", flush=True)
    return results


def _contender(server, token):
    import run
    return run.Contender(server.name, server, token)


def _cpu_seconds(processes):
    """User + system CPU seconds of the worker processes so far."""
    return sum(cpu.tree_cpu_seconds(process.pid) for process in processes)


def _queue(url, receiver_url, count):
    """One subscription and ``count`` deliveries due now."""
    from plantstore import create_app
    from plantstore.db import database
    from plantstore.models import Delivery, Subscription, utcnow
    create_app({"DATABASE_URL": url})
    with database.connection_context(), database.atomic():
        subscription = Subscription.create(url=receiver_url, secret="whsec_" + "A" * 44)
        now = utcnow()
        rows = [{"subscription": subscription.id, "message_id": f"msg_bench{i}",
                 "event_type": "plant.created", "payload": f'{{"id": {i}, "name": "fern"}}',
                 "next_attempt_at": now} for i in range(count)]
        for start in range(0, count, 1000):
            Delivery.insert_many(rows[start:start + 1000]).execute()
    with database.connection_context():
        database.execute_sql("ANALYZE")  # as autovacuum would, in time (see seed.py)
    database.close_all()


def _delivered(url):
    from plantstore.db import database
    from plantstore.models import Delivery
    with database.connection_context():
        return Delivery.select().where(Delivery.status == Delivery.DELIVERED).count()


def measure_worker(venv_bin, count, backends):
    """Deliveries per second and the workers' CPU µs per delivery, drained
    by 1 and 2 workers, per backend (``databases`` backends, each making a
    fresh database per run)."""
    from plantstore import create_app
    results = {}
    port = servers.free_port()
    receiver = Receiver(port)
    try:
        for database in backends:
            backend = {"sqlite": "SQLite", "postgres": "PostgreSQL"}[database.name]
            for workers in (1, 2):
                url = database.url(f"worker-{workers}")
                seed.seed_plantstore(url, 0)
                _queue(url, receiver.url, count)
                create_app({"DATABASE_URL": url})
                env = {**os.environ, **ENV, "PLANTSTORE_DATABASE_URL": url}
                processes = [subprocess.Popen([str(venv_bin / "plantstore"), "worker"],
                                              env=env, start_new_session=True,
                                              stdout=subprocess.DEVNULL,
                                              stderr=subprocess.DEVNULL)
                             for _ in range(workers)]
                first = last = None
                deadline = time.monotonic() + 300
                try:
                    while time.monotonic() < deadline:
                        done = _delivered(url)
                        if done and first is None:
                            first = (time.monotonic(), done, _cpu_seconds(processes))
                        if done >= count:
                            last = (time.monotonic(), _cpu_seconds(processes))
                            break
                        time.sleep(0.02)
                finally:
                    for process in processes:
                        os.killpg(process.pid, signal.SIGTERM)
                        process.wait(timeout=60)
                drained = count - first[1]
                rate = drained / (last[0] - first[0]) if last else float("nan")
                cpu_us = (last[1] - first[2]) / drained * 1e6 if last else float("nan")
                results[(backend, workers)] = {"rate": rate, "cpu_us": cpu_us}
                print(f"worker drain {backend}, {workers} worker(s): {rate:,.0f} "
                      f"deliveries/s, {cpu_us:,.0f} µs CPU per delivery", flush=True)
    finally:
        receiver.stop()
    return results
