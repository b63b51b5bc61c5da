"""``make bench``: plantstore's throughput and latency under wrk, beside the
yardsticks of ../shared/bench when BENCH_COMPARE=1, written to a report.

Environment:
  BENCH_COMPARE=1       also run the bare-WSGI ceiling and the FastAPI peer,
                        alternating runs, and report medians of paired ratios
  BENCH_DATABASE        sqlite, postgres or both (default: both with
                        BENCH_COMPARE=1, else sqlite); PostgreSQL databases
                        are made and dropped on BENCH_POSTGRES_URL (default
                        postgresql://postgres@127.0.0.1:5432/postgres)
  BENCH_SECONDS         seconds per wrk run (default 5)
  BENCH_ROUNDS          runs per workload and server (default 3)
  BENCH_EXTRAS=0        skip the scale, webhook, limiter and memory measurements
  BENCH_ONLY=limiter    only the rate limiter's cost per request
  BENCH_REDIS_URL       the Redis the limiter measurement counts in
                        (default redis://127.0.0.1:6379/8)
  BENCH_MEMORY_REQUESTS requests before memory is read (default 100000)
  BENCH_YARDSTICKS      where ceiling.py and peer_fastapi.py are
                        (default ../shared/bench)
  BENCH_OUTPUT          the report (default docs/performance.md with
                        BENCH_COMPARE=1, bench/results/latest.md without)
  BENCH_ONLY            run just one measurement: fuse, webhook (create p50
                        with a 1 ms receiver) or worker (see bench/webhooks.py)
  BENCH_FUSE_SECONDS    seconds of each fuse run (default 15)
  BENCH_WORKER_DELIVERIES  deliveries each drain-rate run starts with (5000)
"""
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import databases
import load
import report
import seed
import servers
import webhooks

REPO = servers.REPO
VENV_BIN = Path(sys.executable).parent
BENCH_VENV_BIN = REPO / ".venv-bench" / "bin"

PLANTS = 5000
WORKLOADS = [
    ("GET /plants?limit=100", "/plants?limit=100"),
    ("GET /plants?limit=10", "/plants?limit=10"),
    ("POST /plants", None),
]


def env_int(name, default):
    """An integer setting from the environment."""
    return int(os.environ.get(name) or default)


class Contender:
    """A running server with the bearer token that its seeded user holds."""

    def __init__(self, name, server, token):
        self.name, self.server, self.token = name, server, token


class Runner:
    """Runs wrk against contenders, giving each POST run fresh plant ids."""

    def __init__(self, wrk, seconds):
        self.wrk, self.seconds = wrk, seconds
        self.next_ids = 10 ** 12

    def run(self, contender, path, seconds=None, connections=load.CONNECTIONS,
            pause_ms=None):
        """One wrk run of a workload (``path`` None means POST /plants, with
        ``pause_ms`` before each request when given)."""
        seconds = seconds or self.seconds
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
            raise load.LoadError(f"{contender.name}: {result.errors} failed requests "
                                 f"(see {contender.server.log_path})")
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
                print(f"  {contender.name:<14} {result.rps:9.0f} req/s   "
                      f"p50 {result.p50_ms:6.2f} ms   p99 {result.p99_ms:7.2f} ms", flush=True)
        return results


def median_of(results):
    """(req/s, p50, p99) medians of a list of Results."""
    return (statistics.median(r.rps for r in results),
            statistics.median(r.p50_ms for r in results),
            statistics.median(r.p99_ms for r in results))


def median_ratio(ours, theirs):
    """The median of paired req/s ratios, run i of ours over run i of theirs."""
    return statistics.median(a.rps / b.rps for a, b in zip(ours, theirs))


def start(server, started):
    """Start ``server``, remembering it in ``started`` so it is stopped at the end."""
    started.append(server)
    return server.start()


def compare(runner, contenders, rounds):
    """Every workload on every contender, alternating.

    Returns {workload: {name: (medians, paired ratio to plantstore or None)}}.
    """
    for contender in contenders:  # warm up: imports, caches, connection pools
        runner.run(contender, WORKLOADS[0][1], seconds=1)
    table = {}
    for workload, path in WORKLOADS:
        print(f"{workload}  (wrk -t{load.THREADS} -c{load.CONNECTIONS}, "
              f"{runner.seconds}s x {rounds} rounds)", flush=True)
        results = runner.alternate(contenders, path, rounds)
        ours = results["plantstore"]
        table[workload] = {
            name: (median_of(runs), None if name == "plantstore" else median_ratio(ours, runs))
            for name, runs in results.items()}
    return table


def measure_scale(runner, backend, rounds, started, workdir):
    """limit=100 with 1,000,000 plants in the store against 1,000."""
    contenders = []
    for plants in (1000, 1_000_000):
        url = backend.url(f"scale-{plants}")
        print(f"seeding {plants:,} plants ...", flush=True)
        token = seed.seed_plantstore(url, plants)
        server = start(servers.plantstore(url, workdir, VENV_BIN, name=f"plantstore-{plants}"),
                       started)
        contenders.append(Contender(f"{plants:,} plants", server, token))
    print("GET /plants?limit=100 as the store grows", flush=True)
    for contender in contenders:
        runner.run(contender, "/plants?limit=100", seconds=1)
    results = runner.alternate(contenders, "/plants?limit=100", rounds)
    deep = runner.alternate(contenders[1:], "/plants?limit=100&after=900000", 1)
    for server in (c.server for c in contenders):
        server.stop()
    small, large = (median_of(results[c.name]) for c in contenders)
    return {"small": small, "large": large, "deep": median_of(deep[contenders[1].name])}


PAUSE_MS = 10
"""The paced create's pause: longer than a create and its sends take."""


def measure_webhook(runner, workdir, rounds, started, backend):
    """A create with one receiver answering in ~1 ms against a create with none,
    on ``backend`` (see databases.py)."""
    port = servers.free_port()
    receiver = subprocess.Popen([sys.executable, str(Path(__file__).with_name("receiver.py")),
                                 str(port)], start_new_session=True)
    try:
        contenders = []
        for name, receivers in (("no receiver", 0), ("one receiver", 1)):
            url = backend.url(f"webhook-{receivers}")
            token = seed.seed_plantstore(url, PLANTS)
            if receivers:
                subprocess.run([str(VENV_BIN / "plantstore"), "webhooks", "add",
                                f"http://127.0.0.1:{port}/hook"],
                               env={**os.environ, "PLANTSTORE_DATABASE_URL": url},
                               check=True, capture_output=True)
            server = start(servers.plantstore(url, workdir, VENV_BIN,
                                              name=f"plantstore-webhook-{receivers}"), started)
            contenders.append(Contender(name, server, token))
        print(f"POST /plants with and without a webhook receiver ({backend.name})",
              flush=True)
        for contender in contenders:
            runner.run(contender, None, seconds=1)
        results = runner.alternate(contenders, None, rounds)
        print("  ... one create at a time, back to back", flush=True)
        one_at_a_time = runner.alternate(contenders, None, rounds, connections=1)
        print(f"  ... one create every {PAUSE_MS} ms after the last answer", flush=True)
        paced = runner.alternate(contenders, None, rounds, connections=1, pause_ms=PAUSE_MS)
        for server in (c.server for c in contenders):
            server.stop()
        received = int((subprocess.run(["curl", "-s", f"http://127.0.0.1:{port}/"],
                                       capture_output=True, text=True).stdout or "0").split()[0])
    finally:
        receiver.terminate()
        receiver.wait()
    created = sum(r.requests for r in results["one receiver"])
    created += sum(r.requests for r in one_at_a_time["one receiver"])
    created += sum(r.requests for r in paced["one receiver"])
    return {"none": median_of(results["no receiver"]),
            "one": median_of(results["one receiver"]),
            "none_alone": median_of(one_at_a_time["no receiver"]),
            "one_alone": median_of(one_at_a_time["one receiver"]),
            "none_paced": median_of(paced["no receiver"]),
            "one_paced": median_of(paced["one receiver"]),
            "received": received, "created_with_receiver": created}


LIMITER_WORKLOAD = "/plants?limit=10"
NEVER_REACHED_LIMIT = "100000000/minute"


def measure_limiter(runner, workdir, rounds, started):
    """GET /plants?limit=10 without a rate limit, and with one never reached
    (counted in memory, and in Redis); req/s ratios of medians to no limit."""
    url = f"sqlite:///{workdir}/limiter.db"
    token = seed.seed_plantstore(url, PLANTS)
    redis_url = os.environ.get("BENCH_REDIS_URL") or "redis://127.0.0.1:6379/8"
    contenders = []
    for name, env in (("no limit", {}),
                      ("limit, memory", {"PLANTSTORE_RATE_LIMIT": NEVER_REACHED_LIMIT}),
                      ("limit, redis", {"PLANTSTORE_RATE_LIMIT": NEVER_REACHED_LIMIT,
                                        "PLANTSTORE_RATE_LIMIT_STORAGE_URI": redis_url})):
        server = start(servers.plantstore(url, workdir, VENV_BIN, env=env,
                                          name=f"plantstore-{name.replace(', ', '-')}"),
                       started)
        contenders.append(Contender(name, server, token))
    print(f"GET {LIMITER_WORKLOAD} without and with a rate limit", flush=True)
    for contender in contenders:
        runner.run(contender, LIMITER_WORKLOAD, seconds=1)
    results = runner.alternate(contenders, LIMITER_WORKLOAD, rounds)
    for contender in contenders:
        contender.server.stop()
    medians = {name: median_of(runs) for name, runs in results.items()}
    base = medians["no limit"][0]
    for name, (rps, p50, p99) in medians.items():
        print(f"  {name:<14} median {rps:9.0f} req/s  p50 {p50:6.2f} ms  "
              f"({rps / base:.3f} of no limit)", flush=True)
    return medians


def measure_memory(runner, workdir, total, started):
    """VmRSS of each worker after warm-up and after ``total`` requests."""
    url = f"sqlite:///{workdir}/memory.db"
    token = seed.seed_plantstore(url, PLANTS)
    server = start(servers.plantstore(url, workdir, VENV_BIN, name="plantstore-memory"), started)
    contender = Contender("plantstore", server, token)
    print(f"memory: {total:,} requests (list 100, list 10, create in turn)", flush=True)
    done = 0
    for path in (p for _, p in WORKLOADS):
        done += runner.run(contender, path, seconds=1).requests
    warm = server.worker_rss_kib()
    samples = [(done, warm)]
    while done < total:
        for _, path in WORKLOADS:
            done += runner.run(contender, path).requests
        samples.append((done, server.worker_rss_kib()))
        print(f"  {done:>8,} requests   VmRSS " + ", ".join(
            f"{kib / 1024:.1f} MB" for kib in samples[-1][1].values()), flush=True)
    server.stop()
    half = next(s for s in samples if s[0] >= total / 2)
    return {"requests": done, "warm": warm, "half": half, "final": samples[-1][1]}


def measure_webhooks(runner, workdir, rounds, started, only):
    """The webhook measurements ``only`` names (all three when None)."""
    results = {}
    backends = [databases.backend(name, workdir)
                for name in databases.chosen(os.environ.get("BENCH_COMPARE") == "1")]
    try:
        if only in (None, "webhook"):
            results["webhook"] = {
                backend.name: measure_webhook(runner, workdir, rounds, started, backend)
                for backend in backends}
        if only in (None, "fuse"):
            results["fuse"] = webhooks.measure_fuse(runner, workdir, started, VENV_BIN,
                                                    env_int("BENCH_FUSE_SECONDS", 15))
        if only in (None, "worker"):
            results["worker"] = webhooks.measure_worker(
                VENV_BIN, env_int("BENCH_WORKER_DELIVERIES", 5000), backends)
    finally:
        for backend in backends:
            backend.drop_all()
    return results


def main():
    only = os.environ.get("BENCH_ONLY") or None
    if only not in (None, "fuse", "webhook", "worker", "limiter"):
        sys.exit(f"BENCH_ONLY={only!r}: use fuse, webhook, worker or limiter")
    compare_yardsticks = os.environ.get("BENCH_COMPARE") == "1"
    extras = os.environ.get("BENCH_EXTRAS", "1") != "0"
    seconds = env_int("BENCH_SECONDS", 5)
    rounds = env_int("BENCH_ROUNDS", 3)
    yardsticks = Path(os.environ.get("BENCH_YARDSTICKS") or REPO.parent / "shared" / "bench")
    output = Path(os.environ.get("BENCH_OUTPUT") or REPO / (
        "docs/performance.md" if compare_yardsticks else "bench/results/latest.md"))
    runner = Runner(load.ensure_wrk(), seconds)
    workdir = Path(tempfile.mkdtemp(prefix="plantstore-bench-"))
    print(f"working in {workdir}", flush=True)
    started = []
    results = {"backends": {}}
    names = ["plantstore"]
    try:
        if only == "limiter":
            results = {"limiter": measure_limiter(runner, workdir, rounds, started)}
            return _write(report.render(results, [], seconds, rounds), output)
        if only:
            results = measure_webhooks(runner, workdir, rounds, started, only)
            return _write(report.render(results, [], seconds, rounds), output)
        for backend_name in databases.chosen(compare_yardsticks):
            backend = databases.backend(backend_name, workdir)
            try:
                print(f"== {backend_name} ==", flush=True)
                measured = results["backends"][backend_name] = {}
                url = backend.url("plantstore")
                token = seed.seed_plantstore(url, PLANTS)
                contenders = [Contender("plantstore", start(
                    servers.plantstore(url, workdir, VENV_BIN,
                                       name=f"plantstore-{backend_name}"), started), token)]
                if compare_yardsticks:
                    contenders += start_yardsticks(yardsticks, backend, workdir, started)
                names = [c.name for c in contenders]
                measured["compare"] = compare(runner, contenders, rounds)
                for contender in contenders:
                    contender.server.stop()
                if extras:
                    measured["scale"] = measure_scale(runner, backend, rounds, started, workdir)
            finally:
                for server in started:
                    server.stop()
                backend.drop_all()
        if extras:
            results.update(measure_webhooks(runner, workdir, rounds, started, None))
            results["limiter"] = measure_limiter(runner, workdir, rounds, started)
            results["memory"] = measure_memory(
                runner, workdir, env_int("BENCH_MEMORY_REQUESTS", 100_000), started)
    finally:
        for server in started:
            server.stop()
        if not only:  # what was measured is written even if a later part failed
            _write(report.render(results, names, seconds, rounds), output)


def _write(text, output):
    """Print the report and write it to ``output``."""
    print(text)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    print(f"written to {output.relative_to(REPO) if output.is_relative_to(REPO) else output}")


def start_yardsticks(yardsticks, backend, workdir, started):
    """The ceiling and the FastAPI peer, each on its own seeded database."""
    if not (yardsticks / "ceiling.py").exists():
        print(f"no yardsticks in {yardsticks}: plantstore alone", flush=True)
        return []
    contenders = []
    ceiling_env = backend.yardstick_env("ceiling")
    token = seed.seed_yardstick(yardsticks / "ceiling.py", ceiling_env, PLANTS)
    contenders.append(Contender("ceiling", start(
        servers.ceiling(yardsticks, ceiling_env, workdir, VENV_BIN), started), token))
    has_driver = (BENCH_VENV_BIN / "python").exists() and subprocess.run(
        [str(BENCH_VENV_BIN / "python"), "-c", "import psycopg2, uvicorn"],
        capture_output=True).returncode == 0
    if not has_driver:
        print("installing fastapi, uvicorn[standard] and psycopg2-binary into .venv-bench",
              flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(BENCH_VENV_BIN.parent)], check=True)
        subprocess.run([str(BENCH_VENV_BIN / "pip"), "install", "-q", "fastapi",
                        "uvicorn[standard]", "psycopg2-binary"], check=True)
    peer_env = backend.yardstick_env("peer")
    token = seed.seed_yardstick(yardsticks / "ceiling.py", peer_env, PLANTS)
    contenders.append(Contender("fastapi-peer", start(
        servers.peer(yardsticks, peer_env, workdir, BENCH_VENV_BIN), started), token))
    return contenders


if __name__ == "__main__":
    main()
