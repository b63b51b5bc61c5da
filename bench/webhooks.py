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
databases.py), after one drain of each code on that backend that is not
counted, BENCH_WORKER_ROUNDS times; with BENCH_WORKER_AGAINST (another
working tree, e.g. a ``git worktree`` of an earlier release) that tree's
worker is run in turn with this one's on the same receiver, each on a
database in its own schema (bench/worker_queue.py). The rate is counted
from the first delivery to the last (process start-up excluded), and so is
the workers' CPU per delivery (user +
system time of their processes, from /proc: see cpu.py), the steadier figure
on a shared machine.

Many owners (``measure_owners``): one worker drains BENCH_WORKER_DELIVERIES
over OWNER_SUBSCRIPTIONS (16) subscriptions to one receiver answering after
BENCH_OWNERS_RECEIVER_MS (30), owned by one user and by 16 users (one
each), in turn BENCH_WORKER_ROUNDS times (3 unless set), after one uncounted
drain of each: the rate with 16 owners over the rate with one (the median
of paired ratios) shows whether the fair shares leave slots unused, and the
receiver's count of POSTs unanswered at once how many were used.
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

import contest
import cpu
import seed
import servers

RECEIVER = Path(__file__).with_name("receiver.py")
QUEUE = Path(__file__).with_name("worker_queue.py")
# The bench's processes see each other's breakers quickly, and users'
# subscriptions may name receivers on loopback; everything else is the defaults.
ENV = {"PLANTSTORE_WEBHOOK_BREAKER_COOLDOWN": "1", "PLANTSTORE_WORKER_POLL_INTERVAL": "0.2",
       "PLANTSTORE_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8"}


class Receiver:
    """bench/receiver.py on a port of its own (``hang``: never answers)."""

    def __init__(self, port, hang=False, delay_ms=None):
        self.port = port
        self.url = f"http://127.0.0.1:{port}/hook"
        argv = [sys.executable, str(RECEIVER), str(port)] + (["--hang"] if hang else [])
        argv += ["--delay", str(delay_ms)] if delay_ms is not None else []
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
        return self._tally()[:2]

    def most_unanswered(self):
        """The most POSTs it held unanswered at once: attempts under way together."""
        return self._tally()[2]

    def _tally(self):
        text = requests.get(f"http://127.0.0.1:{self.port}/", timeout=5).text
        return [int(number) for number in text.split()]

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
    from plantstore.db.models import Delivery
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
    return contest.Contender(server.name, server, token)


def _cpu_seconds(processes):
    """User + system CPU seconds of the worker processes so far."""
    return sum(cpu.tree_cpu_seconds(process.pid) for process in processes)


class WorkerCode:
    """The plantstore whose worker is measured: this checkout's, or another
    working tree's (``checkout``: its package first on PYTHONPATH, the
    libraries of this virtualenv)."""

    def __init__(self, venv_bin, checkout=None):
        self.python = str(venv_bin / "python")
        self.checkout = checkout
        self.name = f"{checkout.name} ({_commit(checkout)})" if checkout else "this checkout"

    def env(self, url):
        env = {**os.environ, **ENV, "PLANTSTORE_DATABASE_URL": url}
        if self.checkout:
            env["PYTHONPATH"] = str(self.checkout)
        return env

    def queue(self, url, receiver_url, count, subscriptions=1, owners=0):
        """A fresh database with ``count`` deliveries due, in this code's schema,
        over ``subscriptions`` of ``owners`` users (0: the operator's)."""
        subprocess.run([self.python, str(QUEUE), url, receiver_url, str(count),
                        str(subscriptions), str(owners)],
                       env=self.env(url), cwd=self.checkout, check=True, timeout=300)

    def start_worker(self, url):
        """``plantstore worker`` of this code (``python -c`` puts the working
        directory first on the path: it is the checkout's)."""
        return subprocess.Popen(
            [self.python, "-c", "from plantstore.cli import main; main()", "worker"],
            env=self.env(url), cwd=self.checkout, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _commit(checkout):
    return subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip() or "?"


def _drain_once(code, url, receiver_url, count, workers, subscriptions=1, owners=0):
    """Drain ``count`` deliveries (over ``subscriptions`` of ``owners``
    users) with ``workers`` workers of ``code``: (deliveries/s, worker CPU
    µs per delivery), from the first delivery to the last."""
    from playhouse.db_url import connect
    code.queue(url, receiver_url, count, subscriptions, owners)
    counter = connect(url)
    processes = [code.start_worker(url) for _ in range(workers)]
    first = last = None
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            done = counter.execute_sql(
                "SELECT count(*) FROM delivery WHERE status = 'delivered'").fetchone()[0]
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
        counter.close()
    if not last:
        return float("nan"), float("nan")
    drained = count - first[1]
    return drained / (last[0] - first[0]), (last[1] - first[2]) / drained * 1e6


def measure_worker(venv_bin, count, backends, against=None, rounds=1):
    """Deliveries per second and the workers' CPU µs per delivery, drained
    by 1 and 2 workers, per backend (``databases`` backends, each making a
    fresh database per run), ``rounds`` times, medians. With ``against``
    (another working tree) its worker is run too, alternating with this
    one's, and ``ratio`` is the median of the paired ratios of rate,
    this / against."""
    codes = [WorkerCode(venv_bin)] + ([WorkerCode(venv_bin, against)] if against else [])
    drains = {}
    port = servers.free_port()
    receiver = Receiver(port)
    try:
        for database in backends:
            backend = {"sqlite": "SQLite", "postgres": "PostgreSQL"}[database.name]
            # Not counted: each code's first drain of a run was often its
            # slowest (most likely a checkout just edited compiling its
            # modules as the worker first imports them, some during the drain).
            for index, code in enumerate(codes):
                _drain_once(code, database.url(f"worker-warm-up-{index}"), receiver.url,
                            count, 1)
            for workers in (1, 2):
                runs = {code.name: [] for code in codes}
                for round_ in range(rounds):
                    for index, code in enumerate(codes[::-1] if round_ % 2 else codes):
                        url = database.url(f"worker-{workers}-{round_}-{index}")
                        rate, cpu_us = _drain_once(code, url, receiver.url, count, workers)
                        runs[code.name].append((rate, cpu_us))
                        print(f"worker drain {backend}, {workers} worker(s), {code.name}: "
                              f"{rate:,.0f} deliveries/s, {cpu_us:,.0f} µs CPU per delivery",
                              flush=True)
                drains[(backend, workers)] = {
                    role: {"rate": statistics.median(r for r, _ in runs[code.name]),
                           "cpu_us": statistics.median(c for _, c in runs[code.name])}
                    for role, code in zip(("this", "against"), codes)}
                if against:
                    this, other = (runs[code.name] for code in codes)
                    drains[(backend, workers)]["ratio"] = statistics.median(
                        a[0] / b[0] for a, b in zip(this, other))
    finally:
        receiver.stop()
    return {"against": codes[1].name if against else None, "rounds": rounds,
            "drains": drains}


OWNER_SUBSCRIPTIONS = 16
MANY_OWNERS = 16


def measure_owners(venv_bin, count, backends, rounds, receiver_ms):
    """One worker draining ``count`` deliveries over OWNER_SUBSCRIPTIONS
    subscriptions of one owner, and of MANY_OWNERS, alternating (a fresh
    receiver answering after ``receiver_ms`` each drain), ``rounds`` times
    per backend after one uncounted drain of each; per backend the medians
    of rate, CPU µs per delivery and most attempts under way, and the median
    of the paired ratios of rate, many owners / one."""
    code = WorkerCode(venv_bin)
    cases = {"1 owner": 1, f"{MANY_OWNERS} owners": MANY_OWNERS}
    results = {}

    def drain(backend, name, owners, label):
        receiver = Receiver(servers.free_port(), delay_ms=receiver_ms)
        try:
            rate, cpu_us = _drain_once(code, backend.url(f"owners-{label}"), receiver.url,
                                       count, 1, OWNER_SUBSCRIPTIONS, owners)
            return rate, cpu_us, receiver.most_unanswered()
        finally:
            receiver.stop()

    for backend in backends:
        title = {"sqlite": "SQLite", "postgres": "PostgreSQL"}[backend.name]
        for name, owners in cases.items():  # not counted: see measure_worker
            drain(backend, name, owners, f"warm-up-{owners}")
        runs = {name: [] for name in cases}
        for round_ in range(rounds):
            order = list(cases.items())
            for name, owners in order[::-1] if round_ % 2 else order:
                runs[name].append(drain(backend, name, owners, f"{owners}-{round_}"))
                rate, cpu_us, under_way = runs[name][-1]
                print(f"owners drain {title}, {name}, receivers answering in "
                      f"{receiver_ms} ms: {rate:,.0f} deliveries/s, {cpu_us:,.0f} µs CPU "
                      f"per delivery, at most {under_way} under way", flush=True)
        one, many = runs.values()
        results[title] = {
            "cases": {name: {"rate": statistics.median(r for r, _, _ in found),
                             "cpu_us": statistics.median(c for _, c, _ in found),
                             "under_way": statistics.median(u for _, _, u in found)}
                      for name, found in runs.items()},
            "ratio": statistics.median(m[0] / o[0] for m, o in zip(many, one)),
            "ratios": [m[0] / o[0] for m, o in zip(many, one)]}
    return {"rounds": rounds, "receiver_ms": receiver_ms, "count": count,
            "subscriptions": OWNER_SUBSCRIPTIONS, "backends": results}
