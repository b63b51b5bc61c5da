"""The contest of ``make bench``: servers run alternately under wrk, each run
measured for the server's CPU, statements and busiest process, and summed
up as medians with paired ratios against the first contender (plantstore).
Used by ``run.py`` and ``processes.py``.
"""
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import load
import servers
import statements

REPO = servers.REPO
VENV_BIN = Path(sys.executable).parent
BENCH_VENV_BIN = REPO / ".venv-bench" / "bin"

PLANTS = 5000
WORKLOADS = {
    "list100": ("GET /plants?limit=100", "/plants?limit=100"),
    "list10": ("GET /plants?limit=10", "/plants?limit=10"),
    "create": ("POST /plants", None),
}


def postgres_database(url):
    """The database a postgresql:// URL names (where its statements are
    counted), or None for SQLite."""
    parts = urlsplit(url)
    return parts.path.lstrip("/") if parts.scheme.startswith("postgres") else None


class Contender:
    """A running server, the bearer token its seeded user holds, the
    database URL it serves, and how to start another server like it on
    another URL (``serve(database_url, name)``, for the latency-bound run)."""

    def __init__(self, name, server, token, database_url=None, serve=None):
        self.name, self.server, self.token = name, server, token
        self.database_url, self.serve = database_url, serve
        self.database = postgres_database(database_url) if database_url else None


@dataclass
class Summary:
    """Medians of one contender's runs of one workload, and its paired ratios."""
    rps: float
    p50_ms: float
    p99_ms: float
    cpu_us: float
    statements: float | None  # None: not counted (SQLite, or no pg_stat_statements)
    busiest: float | None = None  # the largest run's busiest process / the mean
    rps_ratio: float | None = None
    cpu_ratio: float | None = None


def summarise(runs):
    """The Summary of ``runs`` (its ratios left to the caller: ``paired``)."""
    counted = [r.statements for r in runs]
    busiest = [r.busiest for r in runs if r.busiest is not None]
    return Summary(
        rps=statistics.median(r.rps for r in runs),
        p50_ms=statistics.median(r.p50_ms for r in runs),
        p99_ms=statistics.median(r.p99_ms for r in runs),
        cpu_us=statistics.median(r.cpu_us for r in runs),
        statements=None if None in counted else statistics.median(counted),
        busiest=max(busiest, default=None))


def paired(numerators, denominators, field):
    """The median of ``field``'s ratios of paired runs: run i over run i."""
    return statistics.median(getattr(a, field) / getattr(b, field)
                             for a, b in zip(numerators, denominators))


class Runner:
    """Runs wrk against contenders, giving each POST run fresh plant ids, and
    measures each server's CPU and statements over every run."""

    def __init__(self, wrk, seconds):
        self.wrk, self.seconds = wrk, seconds
        self.next_ids = 10 ** 12
        self.counter = None
        """The StatementCounter of the PostgreSQL being measured, if it counts."""

    def run(self, contender, path, seconds=None, connections=load.CONNECTIONS,
            pause_ms=None):
        """One wrk run of a workload (``path`` None means POST /plants, with
        ``pause_ms`` before each request when given), with the server's CPU
        per request (µs), statements per request, and its busiest worker
        process's CPU over the mean of its workers' (``busiest_process``)."""
        seconds = seconds or self.seconds
        cpu_before = contender.server.cpu_seconds()
        workers_before = contender.server.worker_cpu_seconds()
        window = statements.Window(self.counter, contender.database)
        if path is None:
            self.next_ids += 10 ** 9
            script, args = load.POST_SCRIPT, [self.next_ids]
            if pause_ms is not None:
                script, args = load.PACED_POST_SCRIPT, [self.next_ids, pause_ms]
            result = load.run(self.wrk, contender.server.url + "/plants", contender.token,
                              seconds, script, args, connections=connections)
        else:
            result = load.run(self.wrk, contender.server.url + path, contender.token, seconds,
                              connections=connections)
        if result.errors:
            raise load.LoadError(f"{contender.name}: {result.errors} failed requests, "
                                 f"{result.failures} (see {contender.server.log_path})")
        cpu_used = contender.server.cpu_seconds() - cpu_before
        result.cpu_us = cpu_used * 1e6 / result.requests
        result.statements = window.per(result.requests)
        result.busiest = busiest_process(workers_before,
                                         contender.server.worker_cpu_seconds())
        return result

    def alternate(self, contenders, path, rounds, connections=load.CONNECTIONS,
                  pause_ms=None):
        """A B C A B C ...: ``rounds`` runs each, interleaved; {name: [Result]}."""
        results = {c.name: [] for c in contenders}
        for _ in range(rounds):
            for contender in contenders:
                result = self.run(contender, path, connections=connections,
                                  pause_ms=pause_ms)
                results[contender.name].append(result)
                counted = "" if result.statements is None else \
                    f"   {result.statements:5.2f} statements/req"
                busiest = "" if result.busiest is None else \
                    f"   busiest process {result.busiest:4.2f}x the mean"
                print(f"  {contender.name:<22} {result.rps:8.0f} req/s   "
                      f"p50 {result.p50_ms:6.2f} ms   p99 {result.p99_ms:7.2f} ms   "
                      f"CPU {result.cpu_us:6.0f} µs/req{counted}{busiest}", flush=True)
        return results


def busiest_process(before, after):
    """The busiest worker's CPU over the mean of the workers' over a run,
    from {pid: CPU seconds} before and after it (None with fewer than two
    workers, or none busy)."""
    used = [after[pid] - before[pid] for pid in after if pid in before]
    if len(used) < 2 or not sum(used):
        return None
    return max(used) / (sum(used) / len(used))


def median_of(results):
    """(req/s, p50, p99) medians of a list of Results."""
    return (statistics.median(r.rps for r in results),
            statistics.median(r.p50_ms for r in results),
            statistics.median(r.p99_ms for r in results))


def start(server, started):
    """Start ``server``, remembering it in ``started`` so it is stopped at the end."""
    started.append(server)
    return server.start()


def compare(runner, contenders, rounds, workloads=tuple(WORKLOADS),
            connections=load.CONNECTIONS):
    """The ``workloads`` (keys of WORKLOADS) on every contender, alternating,
    at ``connections`` wrk connections.

    Returns {workload title: {name: Summary}}, the ratios of each yardstick's
    Summary being plantstore's over its own (the first contender's).
    """
    for contender in contenders:  # warm up: imports, caches, connection pools
        for key in workloads:
            runner.run(contender, WORKLOADS[key][1], seconds=1, connections=connections)
    table = {}
    for key in workloads:
        title, path = WORKLOADS[key]
        print(f"{title}  (wrk -t{load.THREADS} -c{connections}, "
              f"{runner.seconds}s x {rounds} rounds)", flush=True)
        results = runner.alternate(contenders, path, rounds, connections=connections)
        ours = results[contenders[0].name]
        table[title] = {}
        for name, runs in results.items():
            summary = table[title][name] = summarise(runs)
            if runs is not ours:
                summary.rps_ratio = paired(ours, runs, "rps")
                summary.cpu_ratio = paired(ours, runs, "cpu_us")
    return table


def ensure_bench_venv():
    """Make .venv-bench, with the FastAPI peer's packages, when it lacks them."""
    has_driver = (BENCH_VENV_BIN / "python").exists() and subprocess.run(
        [str(BENCH_VENV_BIN / "python"), "-c", "import psycopg2, uvicorn"],
        capture_output=True).returncode == 0
    if not has_driver:
        print("installing fastapi, uvicorn[standard] and psycopg2-binary into .venv-bench",
              flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(BENCH_VENV_BIN.parent)], check=True)
        subprocess.run([str(BENCH_VENV_BIN / "pip"), "install", "-q", "fastapi",
                        "uvicorn[standard]", "psycopg2-binary"], check=True)
