"""``make bench BENCH_PROCESSES=1,2,4``: how plantstore scales with its
worker processes, beside the yardsticks (with BENCH_COMPARE=1 or
BENCH_QUICK=1) at the same numbers of processes.

For each number P: every server with P worker processes (each on its own
database, seeded once), wrk with 8 connections per process, kept alive,
the chosen workloads alternating between the servers, BENCH_ROUNDS runs of
BENCH_SECONDS each. Reported per P: req/s, CPU per request, the efficiency
(req/s over what the fewest processes measured served, times as many
processes as they were) and the busiest worker process's CPU over the
mean of its workers' in the least balanced run.
"""
import os

import contest
import load
import seed
import servers


def chosen_counts():
    """The numbers of processes ``BENCH_PROCESSES`` names, ascending (none: unset)."""
    text = os.environ.get("BENCH_PROCESSES") or ""
    try:
        counts = sorted({int(n) for n in text.split(",") if n.strip()})
    except ValueError:
        counts = [0]
    if any(n < 1 for n in counts):
        raise SystemExit(f"BENCH_PROCESSES={text!r}: use numbers of processes, e.g. 1,2,4")
    return counts


def measure_processes(runner, backend, workloads, rounds, yardsticks, counts, workdir,
                      started):
    """{processes: {workload title: {name: Summary}}} for each of ``counts``."""
    servers_of = {"plantstore": lambda url, name, workers: servers.plantstore(
        url, workdir, contest.VENV_BIN, name=name, workers=workers)}
    if yardsticks:
        contest.ensure_bench_venv()
        servers_of["ceiling"] = lambda url, name, workers: servers.ceiling(
            yardsticks, url, workdir, contest.VENV_BIN, name=name, workers=workers)
        servers_of["fastapi-peer"] = lambda url, name, workers: servers.peer(
            yardsticks, url, workdir, contest.BENCH_VENV_BIN, name=name, workers=workers)
    databases = {}
    for name in servers_of:
        url = backend.url(f"processes-{name.replace('-', '_')}")
        token = (seed.seed_plantstore(url, contest.PLANTS) if name == "plantstore" else
                 seed.seed_yardstick(yardsticks / "ceiling.py", url, contest.PLANTS))
        databases[name] = (url, token)
    table = {}
    for workers in counts:
        print(f"== {workers} process(es), wrk -c{load.CONNECTIONS * workers} ==", flush=True)
        contenders = []
        try:
            for name, make in servers_of.items():
                url, token = databases[name]
                server = contest.start(make(url, f"{name}-{workers}p", workers), started)
                contenders.append(contest.Contender(name, server, token, url))
            table[workers] = contest.compare(runner, contenders, rounds, workloads,
                                         connections=load.CONNECTIONS * workers)
        finally:
            for contender in contenders:
                contender.server.stop()
    return table
