"""``make bench``: plantstore's throughput, latency, CPU per request and
statements per request under wrk, beside the yardsticks of ../shared/bench
when BENCH_COMPARE=1, written to a report.

Per contender and workload: req/s, p50 and p99 (from wrk), the server's CPU
per request (user + system time of its whole process tree, from /proc, over
the run, divided by the requests served: see cpu.py) and, on PostgreSQL,
statements per request (pg_stat_statements: see statements.py). CPU per
request is the steadier yardstick on a shared machine: req/s moves with
whatever else runs, the CPU a request costs much less.

Environment:
  BENCH_COMPARE=1       also run the bare-WSGI ceiling and the FastAPI peer,
                        alternating runs, and report medians of paired ratios
  BENCH_QUICK=1         a rerun in minutes: the yardsticks beside plantstore,
                        BENCH_SECONDS 3, no extras, report in
                        bench/results/latest.md; with BENCH_WORKLOADS and
                        BENCH_DATABASE, one workload on one backend
  BENCH_WORKLOADS       comma-separated, of list100, list10, create, latency
                        (default all); latency is the latency-bound run:
                        creates with the database reached directly and
                        through bench/delay_proxy.py holding each chunk
                        0 and 1 ms each way (PostgreSQL only)
  BENCH_LATENCY_CONNECTIONS  wrk connections of the latency-bound run
                        (default 8, as every other workload)
  BENCH_DATABASE        sqlite, postgres or both (default: both with
                        BENCH_COMPARE=1, else sqlite); PostgreSQL databases
                        are made and dropped on a cluster the bench starts
                        (pg_stat_statements loaded) or on BENCH_POSTGRES_URL
                        (see databases.py)
  BENCH_SECONDS         seconds per wrk run (default 5)
  BENCH_ROUNDS          runs per workload and server (default 3)
  BENCH_EXTRAS=0        skip the scale, webhook, limiter and memory measurements
  BENCH_PROCESSES=1,2,4 instead of the usual runs: each workload with every
                        server at each number of worker processes (wrk with
                        8 connections per process): req/s, CPU per request,
                        efficiency and the busiest process over the mean
                        (see bench/processes.py); with BENCH_COMPARE=1 and
                        every workload, written as the scaling section of
                        docs/performance.md (the rest of the page is kept,
                        and a whole run keeps that section)
  BENCH_ONLY=limiter    only the rate limiter's cost per request
  BENCH_ONLY=tracing    only tracing's cost: off, on sampling 1.0 and 0.1
  BENCH_ONLY=portal     only the portal's delivery log on 1,000,000 deliveries
                        (bench/portal_log.py), on both backends unless
                        BENCH_DATABASE says one; writes its section of
                        docs/performance.md (BENCH_PORTAL_ROUNDS: runs per
                        case and user, default 10)
  BENCH_REDIS_URL       the Redis the limiter measurement counts in
                        (default redis://127.0.0.1:6379/8)
  BENCH_MEMORY_REQUESTS requests before memory is read (default 100000)
  BENCH_YARDSTICKS      where ceiling.py and peer_fastapi.py are
                        (default ../shared/bench)
  BENCH_OUTPUT          the report (default docs/performance.md for a whole
                        BENCH_COMPARE=1 run, else bench/results/latest.md)
  BENCH_ONLY            run just one measurement: fuse, webhook (create p50
                        with a 1 ms receiver), worker, owners (one worker's
                        drain with 16 owners against one; see bench/webhooks.py)
                        or fair (bench/fairness.py)
  BENCH_FUSE_SECONDS    seconds of each fuse run (default 15)
  BENCH_FAIR_SECONDS    seconds of the fair-delivery load (default 20; see
                        bench/fairness.py)
  BENCH_WORKER_DELIVERIES  deliveries each drain-rate run starts with (5000)
  BENCH_WORKER_AGAINST  another working tree (a git worktree of an earlier
                        commit) whose worker is drained in turn with this
                        one's, side by side in the report
  BENCH_WORKER_ROUNDS   drain runs per worker count and code (default 1,
                        3 with BENCH_WORKER_AGAINST; the owners drain: 3);
                        medians are reported
  BENCH_OWNERS_RECEIVER_MS  how long the owners drain's receiver takes to
                        answer (default 30)
  BENCH_ONLY=start      only the start-up of `plantstore --help` and `plantstore
                        worker --once`, against the 0.2 s bar (bench/start_up.py)
  BENCH_START_RUNS      runs of each command for the start-up medians (default 21)
"""
import http.server
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import databases
import delay_proxy
import fairness
import load
import portal_log
import processes
import report
import seed
import servers
import start_up
import statements
import webhooks
from contest import (
    BENCH_VENV_BIN,
    PLANTS,
    VENV_BIN,
    WORKLOADS,
    Contender,
    Runner,
    compare,
    ensure_bench_venv,
    median_of,
    paired,
    start,
    summarise,
)

REPO = servers.REPO
PAGE = REPO / "docs" / "performance.md"
"""Written by a whole BENCH_COMPARE=1 run; its scaling section by one with BENCH_PROCESSES."""
LATENCY = "latency"
"""The latency-bound run: creates with the database reached through the delay proxy."""
DELAYS_MS = (0, 1)
"""The proxy's hold each way: 0 (its own cost alone) and 1 ms (a network hop)."""


def env_int(name, default):
    """An integer setting from the environment."""
    return int(os.environ.get(name) or default)


def chosen_workloads():
    """The keys ``BENCH_WORKLOADS`` names (comma-separated; default all):
    list100, list10, create, latency."""
    known = [*WORKLOADS, LATENCY]
    wanted = [w.strip() for w in (os.environ.get("BENCH_WORKLOADS") or ",".join(known)).split(",")]
    unknown = [w for w in wanted if w not in known]
    if unknown or not wanted:
        raise SystemExit(f"BENCH_WORKLOADS={','.join(wanted)!r}: use a comma-separated "
                         f"list of {', '.join(known)}")
    return [w for w in known if w in wanted]


def via_proxy(url, port):
    """``url`` with its host and port replaced by the delay proxy's on loopback."""
    parts = urlsplit(url)
    credentials = parts.netloc.rpartition("@")[0]
    netloc = f"{credentials}@127.0.0.1:{port}" if credentials else f"127.0.0.1:{port}"
    return urlunsplit(parts._replace(netloc=netloc))


def round_trip_ms(url, count=200):
    """The median time of ``SELECT 1`` on ``url``, in ms."""
    import psycopg2
    connection = psycopg2.connect(url)
    try:
        with connection.cursor() as cursor:
            timings = []
            for _ in range(count):
                started = time.perf_counter()
                cursor.execute("SELECT 1")
                cursor.fetchone()
                timings.append((time.perf_counter() - started) * 1000)
    finally:
        connection.close()
    return statistics.median(timings)


def measure_latency(runner, contenders, backend, rounds, started):
    """POST /plants on every contender with its database reached directly,
    through the delay proxy holding nothing, and through it holding each
    chunk 1 ms each way (see delay_proxy.py), alternating.

    Returns {"connections", "round_trip_ms": {link: ms}, "table": {contender:
    {link: Summary}}, "delay_alone": {contender: ratio}, "event_loop"}: each
    proxied Summary's ratios are over the direct one (with the proxy /
    without); "delay_alone" is creates/s with the 1 ms hold over those with
    the proxy holding nothing (the delay's cost without the proxy's CPU).
    """
    connections = env_int("BENCH_LATENCY_CONNECTIONS", load.CONNECTIONS)
    upstream = urlsplit(backend.server_url)
    python = BENCH_VENV_BIN / "python"  # with uvloop, when the yardsticks were installed
    proxies, proxied = {}, []
    try:
        for ms in DELAYS_MS:
            proxies[f"+{ms} ms"] = delay_proxy.DelayProxyProcess(
                upstream.hostname, upstream.port or 5432, ms,
                python=python if python.exists() else sys.executable)
        round_trips = {"direct": round_trip_ms(backend.admin_url)}
        round_trips.update({link: round_trip_ms(via_proxy(backend.admin_url, proxy.port))
                            for link, proxy in proxies.items()})
        print("latency-bound creates: SELECT 1 takes " + ", ".join(
            f"{ms:.2f} ms {link}" for link, ms in round_trips.items()), flush=True)
        variants = {}
        for contender in contenders:
            variants[contender.name] = {"direct": contender}
            for link, proxy in proxies.items():
                name = f"{contender.name} {link}"
                url = via_proxy(contender.database_url, proxy.port)
                server = start(contender.serve(url, name.replace(" ", "").replace("+", "-")),
                               started)
                proxied.append(server)
                variants[contender.name][link] = Contender(name, server, contender.token, url)
        everyone = [v for links in variants.values() for v in links.values()]
        for variant in everyone:
            runner.run(variant, None, seconds=1, connections=connections)
        print(f"POST /plants, database direct and through the proxy (wrk -t{load.THREADS} "
              f"-c{connections}, {runner.seconds}s x {rounds} rounds)", flush=True)
        results = runner.alternate(everyone, None, rounds, connections=connections)
    finally:
        for server in proxied:
            server.stop()
        for proxy in proxies.values():
            proxy.stop()
    table, delay_alone = {}, {}
    for name, links in variants.items():
        direct = results[links["direct"].name]
        table[name] = {}
        for link, variant in links.items():
            runs = results[variant.name]
            summary = table[name][link] = summarise(runs)
            if runs is not direct:
                summary.rps_ratio = paired(runs, direct, "rps")
                summary.cpu_ratio = paired(runs, direct, "cpu_us")
        delay_alone[name] = paired(results[links["+1 ms"].name],
                                   results[links["+0 ms"].name], "rps")
    return {"connections": connections, "round_trip_ms": round_trips, "table": table,
            "delay_alone": delay_alone,
            "event_loop": next(iter(proxies.values())).event_loop}


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
    for name, (rps, p50, _) in medians.items():
        print(f"  {name:<14} median {rps:9.0f} req/s  p50 {p50:6.2f} ms  "
              f"({rps / base:.3f} of no limit)", flush=True)
    return medians


class _TraceSink(http.server.ThreadingHTTPServer):
    """An OTLP/HTTP endpoint on loopback that accepts every export and keeps nothing."""
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _TraceSinkHandler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


class _TraceSinkHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def measure_tracing(runner, workdir, rounds, started):
    """GET /plants?limit=10 and POST /plants with tracing off, and on with every
    trace sampled and one in ten (exported over OTLP/HTTP to a sink on loopback)."""
    url = f"sqlite:///{workdir}/tracing.db"
    token = seed.seed_plantstore(url, PLANTS)
    sink = _TraceSink()
    endpoint = f"http://127.0.0.1:{sink.server_address[1]}"
    contenders = []
    for name, env in (("off", {}),
                      ("on, sampled 1.0", {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
                                           "OTEL_TRACES_SAMPLER": "traceidratio",
                                           "OTEL_TRACES_SAMPLER_ARG": "1.0"}),
                      ("on, sampled 0.1", {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
                                           "OTEL_TRACES_SAMPLER": "traceidratio",
                                           "OTEL_TRACES_SAMPLER_ARG": "0.1"})):
        server = start(servers.plantstore(url, workdir, VENV_BIN, env=env,
                                          name=f"plantstore-tracing-{name[-3:].strip()}"),
                       started)
        contenders.append(Contender(f"tracing {name}", server, token))
    results = {}
    for workload in ("list10", "create"):
        path = WORKLOADS[workload][1]
        print(f"tracing: {workload} with tracing off and on", flush=True)
        for contender in contenders:
            runner.run(contender, path, seconds=1)
        runs = runner.alternate(contenders, path, rounds)
        results[workload] = {name: median_of(found) for name, found in runs.items()}
        for name, (rps, p50, _) in results[workload].items():
            print(f"  {name:<26} median {rps:9.0f} req/s  p50 {p50:6.2f} ms", flush=True)
    for contender in contenders:
        contender.server.stop()
    sink.shutdown()
    return results


def measure_memory(runner, workdir, total, started):
    """VmRSS of each worker after warm-up and after ``total`` requests."""
    url = f"sqlite:///{workdir}/memory.db"
    token = seed.seed_plantstore(url, PLANTS)
    server = start(servers.plantstore(url, workdir, VENV_BIN, name="plantstore-memory"), started)
    contender = Contender("plantstore", server, token)
    print(f"memory: {total:,} requests (list 100, list 10, create in turn)", flush=True)
    done = 0
    for _, path in WORKLOADS.values():
        done += runner.run(contender, path, seconds=1).requests
    warm = server.worker_rss_kib()
    samples = [(done, warm)]
    while done < total:
        for _, path in WORKLOADS.values():
            done += runner.run(contender, path).requests
        samples.append((done, server.worker_rss_kib()))
        print(f"  {done:>8,} requests   VmRSS " + ", ".join(
            f"{kib / 1024:.1f} MB" for kib in samples[-1][1].values()), flush=True)
    server.stop()
    half = next(s for s in samples if s[0] >= total / 2)
    return {"requests": done, "warm": warm, "half": half, "final": samples[-1][1]}


def measure_webhooks(runner, workdir, rounds, started, only, backends):
    """The webhook measurements ``only`` names (all three when None), on
    ``backends`` (the fuse is on SQLite alone)."""
    results = {}
    if only in (None, "webhook"):
        results["webhook"] = {
            backend.name: measure_webhook(runner, workdir, rounds, started, backend)
            for backend in backends}
    if only in (None, "fuse"):
        results["fuse"] = webhooks.measure_fuse(runner, workdir, started, VENV_BIN,
                                                env_int("BENCH_FUSE_SECONDS", 15))
    if only in (None, "worker"):
        against = os.environ.get("BENCH_WORKER_AGAINST")
        results["worker"] = webhooks.measure_worker(
            VENV_BIN, env_int("BENCH_WORKER_DELIVERIES", 5000), backends,
            against=Path(against).expanduser().resolve() if against else None,
            rounds=env_int("BENCH_WORKER_ROUNDS", 3 if against else 1))
    if only in (None, "owners"):
        results["owners"] = webhooks.measure_owners(
            VENV_BIN, env_int("BENCH_WORKER_DELIVERIES", 5000), backends,
            env_int("BENCH_WORKER_ROUNDS", 3), env_int("BENCH_OWNERS_RECEIVER_MS", 30))
    if only in (None, "fair"):
        results["fair"] = {
            backend.name: fairness.measure_fairness(
                workdir, started, VENV_BIN, backend.url("fair"),
                env_int("BENCH_FAIR_SECONDS", 20))
            for backend in backends}
    for backend in backends:
        backend.drop_all()
    return results


def measure_backend(runner, backend, workloads, rounds, yardsticks, extras, workdir, started):
    """The workloads on plantstore (and the yardsticks, when ``yardsticks``
    is a directory holding them) on one backend; what the report shows of it."""
    counter, not_counted = statements.StatementCounter.connect(backend.admin_url) \
        if backend.admin_url else (None, "SQLite has no server to count them")
    runner.counter = counter
    measured = {"description": backend.description, "not_counted": not_counted}
    try:
        url = backend.url("plantstore")
        token = seed.seed_plantstore(url, PLANTS)
        contenders = [Contender(
            "plantstore", start(plantstore_server(url, "plantstore", workdir), started), token,
            url, lambda url, name: plantstore_server(url, name, workdir))]
        if yardsticks:
            contenders += start_yardsticks(yardsticks, backend, workdir, started)
        compared = [w for w in workloads if w in WORKLOADS]
        if compared:
            measured["compare"] = compare(runner, contenders, rounds, compared)
        if LATENCY in workloads and backend.name == "postgres":
            measured["latency"] = measure_latency(runner, contenders, backend, rounds, started)
        for contender in contenders:
            contender.server.stop()
        if extras:
            measured["scale"] = measure_scale(runner, backend, rounds, started, workdir)
    finally:
        runner.counter = None
        if counter:
            counter.close()
        backend.drop_all()
    return measured


def plantstore_server(url, name, workdir):
    """plantstore under gunicorn on ``url``, its log named after ``name``."""
    return servers.plantstore(url, workdir, VENV_BIN, name=name)


def main():
    only = os.environ.get("BENCH_ONLY") or None
    if only not in (None, "fuse", "webhook", "worker", "owners", "fair", "limiter", "tracing",
                    "portal", "start"):
        sys.exit(f"BENCH_ONLY={only!r}: use fuse, webhook, worker, owners, fair, limiter, "
                 "tracing, portal or start")
    if only == "portal":
        return measure_portal()
    quick = os.environ.get("BENCH_QUICK") == "1"
    compare_yardsticks = quick or os.environ.get("BENCH_COMPARE") == "1"
    extras = not quick and os.environ.get("BENCH_EXTRAS", "1") != "0"
    workloads = chosen_workloads()
    counts = processes.chosen_counts()
    seconds = env_int("BENCH_SECONDS", 3 if quick else 5)
    rounds = env_int("BENCH_ROUNDS", 3)
    yardsticks = Path(os.environ.get("BENCH_YARDSTICKS") or REPO.parent / "shared" / "bench")
    if compare_yardsticks and not (yardsticks / "ceiling.py").exists():
        print(f"no yardsticks in {yardsticks}: plantstore alone", flush=True)
        compare_yardsticks = False
    whole = compare_yardsticks and not quick and len(workloads) == len(WORKLOADS) + 1
    output = Path(os.environ.get("BENCH_OUTPUT")
                  or (PAGE if whole else REPO / "bench/results/latest.md"))
    first_commit = report.commit()

    def write(results, names):
        """Print the report of ``results`` and write it to ``output``: the
        scaling section of a page a whole run writes is kept, and a scaling
        run replaces only that section of it."""
        old = output.read_text() if output.exists() else ""
        if "processes" in results:
            text = report.render_scaling(results, names, seconds, rounds, invocation(),
                                         first_commit)
            if output == PAGE:
                text = report.with_scaling(old, text)
        else:
            text = report.render(results, names, seconds, rounds, invocation(), first_commit)
            if output == PAGE:
                text = report.with_scaling(text, report.scaling_of(old))
                text = portal_log.with_section(text, portal_log.section_of(old))
        print(text)
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
        print(f"written to {output.relative_to(REPO) if output.is_relative_to(REPO) else output}")

    runner = Runner(load.ensure_wrk(), seconds)
    workdir = Path(tempfile.mkdtemp(prefix="plantstore-bench-"))
    print(f"working in {workdir}", flush=True)
    started = []
    backends = []
    results = {"backends": {}}
    names = ["plantstore"]
    try:
        if only == "limiter":
            results = {"limiter": measure_limiter(runner, workdir, rounds, started)}
            return write(results, [])
        if only == "tracing":
            results = {"tracing": measure_tracing(runner, workdir, rounds, started)}
            return write(results, [])
        if only == "start":
            results = {"start_up": start_up.measure_start_up(
                VENV_BIN, workdir, env_int("BENCH_START_RUNS", 21))}
            return write(results, [])
        for backend_name in databases.chosen(compare_yardsticks):
            backends.append(databases.backend(backend_name, workdir))
        if only:
            results = measure_webhooks(runner, workdir, rounds, started, only, backends)
            return write(results, [])
        if counts:
            results = {"processes": {
                backend.name: processes.measure_processes(
                    runner, backend, [w for w in workloads if w in WORKLOADS], rounds,
                    yardsticks if compare_yardsticks else None, counts, workdir, started)
                for backend in backends}}
            return write(results, names + (["ceiling", "fastapi-peer"]
                                           if compare_yardsticks else []))
        if compare_yardsticks:
            names += ["ceiling", "fastapi-peer"]
        for backend in backends:
            print(f"== {backend.name}: {backend.description} ==", flush=True)
            try:
                results["backends"][backend.name] = measure_backend(
                    runner, backend, workloads, rounds,
                    yardsticks if compare_yardsticks else None, extras, workdir, started)
            finally:
                for server in started:
                    server.stop()
        if extras:
            results.update(measure_webhooks(runner, workdir, rounds, started, None, backends))
            results["limiter"] = measure_limiter(runner, workdir, rounds, started)
            results["tracing"] = measure_tracing(runner, workdir, rounds, started)
            results["memory"] = measure_memory(
                runner, workdir, env_int("BENCH_MEMORY_REQUESTS", 100_000), started)
            results["start_up"] = start_up.measure_start_up(
                VENV_BIN, workdir, env_int("BENCH_START_RUNS", 21))
    finally:
        for server in started:
            server.stop()
        for backend in backends:
            backend.close()
        if not only and not counts:  # what was measured is written even if a later
            write(results, names)     # part failed (a scaling run only when complete)


def measure_portal():
    """BENCH_ONLY=portal: seed, measure, print and write the portal's section
    of docs/performance.md (the rest of the page is kept)."""
    workdir = Path(tempfile.mkdtemp(prefix="plantstore-bench-"))
    backends = [databases.backend(name, workdir) for name in databases.chosen(True)]
    rounds = portal_log.rounds_wanted()
    first_commit = report.commit()
    try:
        results = portal_log.run(backends, rounds)
    finally:
        for backend in backends:
            backend.close()
    now, measured = report.when(first_commit)
    section = portal_log.render(results, rounds, invocation(),
                                f"{now:%Y-%m-%d %H:%M} UTC, {measured}")
    print(section)
    PAGE.write_text(portal_log.with_section(PAGE.read_text(), section))
    print(f"written to {PAGE.relative_to(REPO)}")


def invocation():
    """The ``make bench`` command line this run amounts to (its BENCH_* settings)."""
    settings = sorted(f"{key}={value}" for key, value in os.environ.items()
                      if key.startswith(("BENCH_", "AB_")) and value)
    return " ".join(["make bench", *settings])


def start_yardsticks(yardsticks, backend, workdir, started):
    """The ceiling and the FastAPI peer, each on its own seeded database."""
    ceiling_py = yardsticks / "ceiling.py"
    ceiling_url = backend.url("ceiling")
    ceiling_token = seed.seed_yardstick(ceiling_py, ceiling_url, PLANTS)

    def ceiling(url, name):
        return servers.ceiling(yardsticks, url, workdir, VENV_BIN, name=name)

    ensure_bench_venv()
    peer_url = backend.url("peer")
    peer_token = seed.seed_yardstick(ceiling_py, peer_url, PLANTS)

    def peer(url, name):
        return servers.peer(yardsticks, url, workdir, BENCH_VENV_BIN, name=name)

    return [Contender("ceiling", start(ceiling(ceiling_url, "ceiling"), started),
                      ceiling_token, ceiling_url, ceiling),
            Contender("fastapi-peer", start(peer(peer_url, "fastapi-peer"), started),
                      peer_token, peer_url, peer)]


if __name__ == "__main__":
    main()
