"""The benchmark's report: Markdown tables of medians, ratios and targets."""
import datetime
import os
import platform
import sqlite3
import subprocess

import load
import servers
import start_up

# workload: (least ratio to the ceiling, least ratio to the FastAPI peer)
TARGETS = {
    "GET /plants?limit=100": (0.6, 1.0),
    "GET /plants?limit=10": (0.6, 1.0),
    "POST /plants": (0.7, 1.0),
}
CPU_TARGET = 1.0        # plantstore's CPU per request / the FastAPI peer's, at most
LATENCY_TARGET = 0.8    # creates/s with the database 1 ms away each way / direct
SCALE_TARGET = 1.2      # p50 with 1,000,000 plants / p50 with 1,000
WEBHOOK_TARGET = 1.5    # p50 of a create with one receiver / with none
FUSE_TARGET = 0.8       # create req/s with a hanging receiver / with a healthy one
FUSE_READ_P99_MS = 100  # /healthz and GET /plants p99 meanwhile
WORKER_TARGET = 1000    # deliveries/s by one worker on PostgreSQL
FAIR_P95_TARGET_S = 2.0  # a quiet user's delivery delay beside slow receivers, p95
TWO_WORKERS_TARGET = 1.6
BUSIEST_TARGET = 1.2    # the busiest worker process's CPU / the mean of its workers'
OWNERS_TARGET = 0.9     # one worker's drain with 16 owners / with one, at slow receivers
MEMORY_TARGET_MB = 60


def _cpu():
    """The CPU model, from /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


BACKEND_TITLES = {"sqlite": "SQLite", "postgres": "PostgreSQL"}


def _verdict(ok):
    """How a target reads in the report."""
    return "met" if ok else "**not met**"


def machine():
    """One line naming the machine and software the numbers come from."""
    worker_class, threads, reuse_port = servers.gunicorn_worker_settings()
    sockets = "a listening socket per process (reuse_port)" if reuse_port else \
        "one listening socket"
    return (f"{_cpu()}, {os.cpu_count()} cores; Linux {platform.release()}; "
            f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}; "
            f"gunicorn worker class `{worker_class}`, {threads} thread(s), "
            f"{sockets}, "
            f"{servers.WORKERS} workers; load from wrk -t{load.THREADS} -c{load.CONNECTIONS} "
            f"on the same machine; load average when the report was written "
            f"{os.getloadavg()[0]:.1f} (the others' work shares the cores)")


SCALING_BEGIN = "<!-- scaling: written by make bench BENCH_PROCESSES=... -->"
SCALING_END = "<!-- end of scaling -->"


def when(first_commit):
    """(now, which commit was measured) for a report's first line."""
    last_commit = commit()
    return (datetime.datetime.now(datetime.timezone.utc),
            f"at commit {last_commit}" if last_commit == first_commit else
            f"while the code changed: from commit {first_commit} to {last_commit}")


def render_scaling(results, names, seconds, rounds, command, first_commit):
    """The scaling section (``BENCH_PROCESSES``) alone, between its markers,
    with how and when it was measured: a page keeps it when rewritten."""
    now, measured = when(first_commit)
    lines = [SCALING_BEGIN, "## Scaling with the processes", "",
             f"Measured by `{command}` on {now:%Y-%m-%d %H:%M} UTC, {measured}, on "
             f"{_cpu()}, {os.cpu_count()} cores. Each server at each number of worker "
             f"processes, wrk with {load.CONNECTIONS} connections per process, kept alive; "
             f"every figure the median of {rounds} runs of {seconds} s, the servers' runs "
             "alternating. *Efficiency*: req/s over what the fewest processes measured "
             "served, times as many. *Busiest / mean*: the CPU of the busiest worker "
             "process over the mean of its workers', in the least balanced run (at most "
             f"{BUSIEST_TARGET}x is the target).", ""]
    for backend, table in results["processes"].items():
        lines += _processes(BACKEND_TITLES[backend], table, names)
    return "\n".join(lines + [SCALING_END]) + "\n"


def scaling_of(page):
    """The scaling section of ``page`` (with its markers), or ""."""
    begin, end = page.find(SCALING_BEGIN), page.find(SCALING_END)
    return page[begin:end + len(SCALING_END)] + "\n" if 0 <= begin < end else ""


def with_scaling(page, section):
    """``page`` with its scaling section replaced by ``section`` (added at its
    end when it has none)."""
    old = scaling_of(page)
    if old:
        return page.replace(old, section)
    return page + ("\n" if section else "") + section


def render(results, names, seconds, rounds, command, first_commit):
    """The whole report as Markdown; ``command`` is how the bench was run,
    ``first_commit`` what ``commit()`` said when it started."""
    now, measured = when(first_commit)
    lines = [
        "# plantstore performance",
        "",
        f"Measured by `{command}` on {now:%Y-%m-%d %H:%M} UTC, {measured}.",
        "",
        f"Machine: {machine()}.",
        "",
        f"Every figure is the median of {rounds} runs of {seconds} s; the servers "
        "ran side by side and their runs alternated, so drift on a shared machine "
        "hits them alike, and each ratio is the median of the ratios of paired "
        "runs. Each server: 2 processes (plantstore and the ceiling under gunicorn "
        "with the same worker class and threads, the FastAPI peer under uvicorn), "
        "a throwaway database of its own "
        "(SQLite file, or PostgreSQL database followed by `ANALYZE`) seeded with "
        "one user, one token and 5,000 plants.",
        "",
        "*CPU µs/req* is the user + system time of the server's whole process "
        "tree (master and workers, from `/proc/<pid>/stat`) over the run, divided "
        "by the requests served: the yardstick that moves least when other work "
        "shares the machine. *Statements/req* counts every top-level statement "
        "the server sent PostgreSQL in the run, `BEGIN` and `COMMIT` included "
        "(`pg_stat_statements`, `track=top`); n/a where nothing counts them.",
        "",
    ]
    for backend, measured in results.get("backends", {}).items():
        lines += [f"## {BACKEND_TITLES[backend]}", "",
                  f"Database: {measured['description']}."
                  + (f" Statements per request: n/a, {measured['not_counted']}."
                     if measured["not_counted"] else ""), ""]
        if "compare" in measured:
            lines += _compare_table(measured["compare"], names)
        if "latency" in measured:
            lines += _latency(measured["latency"])
        if "scale" in measured:
            lines += _scale(measured["scale"])
    if "webhook" in results:
        lines += _webhook(results["webhook"])
    if "fuse" in results:
        lines += _fuse(results["fuse"])
    if "worker" in results:
        lines += _worker(results["worker"])
    if "owners" in results:
        lines += _owners(results["owners"])
    if "fair" in results:
        lines += _fair(results["fair"])
    if "limiter" in results:
        lines += _limiter(results["limiter"])
    if "tracing" in results:
        lines += _tracing(results["tracing"])
    if "memory" in results:
        lines += _memory(results["memory"])
    if "start_up" in results:
        lines += start_up.render(results["start_up"])
    return "\n".join(lines) + "\n"


def commit():
    """The commit the service's code is at, marked when the working tree
    differs from it."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=servers.REPO, capture_output=True,
                              text=True).stdout.strip()
    commit = git("rev-parse", "--short=12", "HEAD") or "unknown"
    changed = git("status", "--porcelain", "--untracked-files=no", "--", "plantstore",
                  "config", "wsgi.py")
    return f"`{commit}`" + (" (with uncommitted changes to the service)" if changed else "")


def _processes(backend, table, names):
    """Per workload, each server at each number of processes: req/s, the
    efficiency, CPU per request and the busiest process over the mean."""
    counts = sorted(table)
    fewest = counts[0]
    lines = [f"### {backend}", "",
             "| workload | server | " + " | ".join(
                 f"{n} process{'es' if n > 1 else ''}: req/s, efficiency, CPU µs/req, "
                 "busiest / mean" for n in counts) + " |",
             "|---|---|" + "---|" * len(counts)]
    for workload in table[fewest]:
        for n, name in enumerate(names):
            base = table[fewest][workload][name].rps
            cells = []
            for count in counts:
                m = table[count][workload][name]
                cells.append(f"{m.rps:,.0f}, {m.rps / (base * count / fewest):.2f}, "
                             f"{m.cpu_us:,.0f}, {_busiest(m.busiest)}")
            lines.append(f"| {f'`{workload}`' if n == 0 else ''} | {name} | "
                         + " | ".join(cells) + " |")
    return lines + [""]


def _busiest(value):
    """A busiest-process ratio as the report prints it."""
    return "n/a" if value is None else f"{value:.2f}x"


def _statements(value):
    """Statements per request as the report prints it."""
    return "n/a" if value is None else f"{value:.2f}"


def _fuse(fuse):
    """Creates while a receiver hangs, against a healthy one and none."""
    lines = [
        "## The fuse: a receiver that hangs", "",
        "`POST /plants` under wrk (one run each) with no subscription, with one "
        "healthy receiver, and with one that accepts connections and never answers, "
        "while a probe reads `/healthz` and `GET /plants?limit=10`. Afterwards the "
        "receiver answers again and `plantstore worker --once` drains the outbox.", "",
        "| receiver | req/s | p50 ms | /healthz p99 ms | GET /plants p99 ms | "
        "plants created | distinct webhook-ids received | POSTs received |",
        "|---|---|---|---|---|---|---|---|"]
    for case, row in fuse.items():
        lines.append(
            f"| {case} | {row['rps']:,.0f} | {row['p50']:.2f} | "
            f"{row['p99 /healthz']:.1f} | {row['p99 /plants?limit=10']:.1f} | "
            f"{row['created']:,} | {row.get('delivered', '-'):,} | {row.get('posts', '-'):,} |"
            if "delivered" in row else
            f"| {case} | {row['rps']:,.0f} | {row['p50']:.2f} | "
            f"{row['p99 /healthz']:.1f} | {row['p99 /plants?limit=10']:.1f} | "
            f"{row['created']:,} | - | - |")
    hanging, healthy, none = fuse["hanging"], fuse["healthy"], fuse["none"]
    ratio = hanging["rps"] / healthy["rps"]
    reads = max(hanging["p99 /healthz"], hanging["p99 /plants?limit=10"])
    complete = all(fuse[c]["delivered"] >= fuse[c]["created"] for c in ("healthy", "hanging"))
    lines += [
        "",
        f"Hanging / healthy: **{ratio:.2f}x** (target >= {FUSE_TARGET}x: "
        f"{_verdict(ratio >= FUSE_TARGET)}); hanging / none: "
        f"{hanging['rps'] / none['rps']:.2f}x. Reads p99 while it hangs: {reads:.1f} ms "
        f"(target < {FUSE_READ_P99_MS} ms: {_verdict(reads < FUSE_READ_P99_MS)}). Every "
        f"plant delivered: {_verdict(complete)} (plants created include wrk's "
        "warm-up-free run only; a POST counted beyond the distinct ids is a resend after "
        "a timed-out attempt, never a concurrent one).", ""]
    return lines


def _fair(fair):
    """A quiet user's delivery delays beside another user's slow receivers."""
    lines = ["## Fair delivery: a quiet user beside slow receivers", "",
             "User A's ten receivers answer 200 after 3 s (no breaker opens), user B's "
             "at once; A creates with 3 clients and B with 2, one `plantstore worker` "
             "running (`bench/fairness.py`). B's delay: from the create's answer to the "
             "event's arrival at B's receiver.", "",
             "| database | plants A / B | B p95 s | B largest s | B missing 10 s after "
             "| A's events delivered |", "|---|---|---|---|---|---|"]
    for backend, row in fair.items():
        lines.append(f"| {backend} | {row['created A']:,} / {row['created B']:,} | "
                     f"{row['B p95 s']:.2f} | {row['B max s']:.2f} | "
                     f"{row['B missing 10 s after']} | {row['A delivered']:,} |")
    met = all(row["B p95 s"] <= FAIR_P95_TARGET_S and not row["B missing 10 s after"]
              for row in fair.values())
    lines += ["", f"B's p95 <= {FAIR_P95_TARGET_S:g} s and none missing 10 s after the "
              f"load: {_verdict(met)}.", ""]
    return lines


def _owners(owners):
    """One worker's drain with many owners beside one owner's."""
    lines = ["## The drain with many owners", "",
             f"{owners['count']:,} deliveries due at once over {owners['subscriptions']} "
             "subscriptions to one receiver (`bench/receiver.py`) answering after "
             f"{owners['receiver_ms']} ms, owned by one user or by one user each, drained "
             "by one `plantstore worker`, the two in turn; medians of "
             f"{owners['rounds']} runs, and the median of the paired ratios. *Under way*: "
             "the most POSTs the receiver held unanswered at once.", "",
             "| database | owners | deliveries/s | CPU µs/delivery | under way |",
             "|---|---|---|---|---|"]
    for backend, measured in owners["backends"].items():
        for name, case in measured["cases"].items():
            lines.append(f"| {backend} | {name} | {case['rate']:,.0f} | "
                         f"{case['cpu_us']:,.0f} | {case['under_way']:.0f} |")
    lines.append("")
    for backend, measured in owners["backends"].items():
        ratios = ", ".join(f"{r:.2f}x" for r in measured["ratios"])
        lines.append(f"{backend}: many owners / one **{measured['ratio']:.2f}x** "
                     f"(runs: {ratios}; target >= {OWNERS_TARGET}x: "
                     f"{_verdict(measured['ratio'] >= OWNERS_TARGET)}).")
    return lines + [""]


def _worker(worker):
    """Deliveries per second drained by one and two workers, and their CPU
    per delivery; beside another release's when one was measured."""
    drains, against = worker["drains"], worker["against"]
    lines = ["## The worker's drain rate", "",
             "Deliveries due at once to a fast keep-alive receiver on loopback "
             "(`bench/receiver.py`), drained by `plantstore worker` processes; counted "
             "from the first delivery to the last, as is the workers' CPU (user + "
             "system, from `/proc`) per delivery; medians of "
             f"{worker['rounds']} run(s).", ""]
    if against:
        lines += [f"Beside {against}, run in turn on the same receiver; the ratio is "
                  "the median of paired ratios of rate.", "",
                  "| database | workers | this | against | this / against "
                  "| CPU µs/delivery, this | against |", "|---|---|---|---|---|---|---|"]
        for (backend, workers), drain in drains.items():
            this, other = drain["this"], drain["against"]
            lines.append(f"| {backend} | {workers} | {this['rate']:,.0f}/s "
                         f"| {other['rate']:,.0f}/s | {drain['ratio']:.2f}x "
                         f"| {this['cpu_us']:,.0f} | {other['cpu_us']:,.0f} |")
    else:
        lines += ["| database | 1 worker | 2 workers | 2 / 1 | CPU µs/delivery, 1 worker "
                  "| 2 workers |", "|---|---|---|---|---|---|"]
        for backend in dict.fromkeys(backend for backend, _ in drains):
            one, two = drains[(backend, 1)]["this"], drains[(backend, 2)]["this"]
            lines.append(f"| {backend} | {one['rate']:,.0f}/s | {two['rate']:,.0f}/s "
                         f"| {two['rate'] / one['rate']:.2f}x | {one['cpu_us']:,.0f} "
                         f"| {two['cpu_us']:,.0f} |")
    if ("PostgreSQL", 1) in drains:
        one = drains[("PostgreSQL", 1)]["this"]["rate"]
        two = drains[("PostgreSQL", 2)]["this"]["rate"]
        lines += ["", f"PostgreSQL, one worker >= {WORKER_TARGET}/s: "
                  f"{_verdict(one >= WORKER_TARGET)}; two >= {TWO_WORKERS_TARGET}x one: "
                  f"{_verdict(two >= TWO_WORKERS_TARGET * one)}."]
    return lines + [""]


def _compare_table(table, names):
    """Per workload and server: medians, CPU and statements per request; then
    the paired ratios against the targets."""
    lines = ["| workload | server | req/s | p50 ms | p99 ms | CPU µs/req | statements/req "
             "| busiest process / mean |", "|---|---|---|---|---|---|---|---|"]
    for workload, measured in table.items():
        for n, name in enumerate(names):
            m = measured[name]
            lines.append(f"| {f'`{workload}`' if n == 0 else ''} | {name} | {m.rps:,.0f} | "
                         f"{m.p50_ms:.2f} | {m.p99_ms:.2f} | {m.cpu_us:,.0f} | "
                         f"{_statements(m.statements)} | {_busiest(m.busiest)} |")
    lines += ["", "*Busiest process / mean*: the CPU of the server's busiest worker "
              "process over the mean of its workers', in the least balanced of the runs.", ""]
    if len(names) == 1:
        return lines
    lines += ["Medians of paired ratios, plantstore / yardstick: req/s (higher is better) "
              "and CPU per request (lower is better), against the targets:", "",
              "| workload | req/s vs ceiling | target | | req/s vs FastAPI peer | target | "
              "| CPU/req vs FastAPI peer | target | | CPU/req vs ceiling |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for workload, measured in table.items():
        ceiling, peer = measured["ceiling"], measured["fastapi-peer"]
        least_of_ceiling, least_of_peer = TARGETS[workload]
        lines.append(
            f"| `{workload}` "
            f"| {ceiling.rps_ratio:.2f}x | >= {least_of_ceiling}x "
            f"| {_verdict(ceiling.rps_ratio >= least_of_ceiling)} "
            f"| {peer.rps_ratio:.2f}x | >= {least_of_peer}x "
            f"| {_verdict(peer.rps_ratio >= least_of_peer)} "
            f"| {peer.cpu_ratio:.2f}x | <= {CPU_TARGET}x "
            f"| {_verdict(peer.cpu_ratio <= CPU_TARGET)} | {ceiling.cpu_ratio:.2f}x |")
    lines.append("")
    return lines


def _latency(latency):
    """Creates with the database direct, and through the delay proxy."""
    round_trips = latency["round_trip_ms"]
    lines = [
        "### Latency-bound creates", "",
        f"`POST /plants` (wrk -t{load.THREADS} -c{latency['connections']}) with each "
        "server's database reached directly, through `bench/delay_proxy.py` holding "
        "nothing, and through it holding every chunk 1 ms each way (a database a "
        "network hop away). A `SELECT 1` took a median "
        + ", ".join(f"{ms:.2f} ms {_way(link)}" for link, ms in round_trips.items())
        + " (the proxy's timers wake on whole milliseconds: a hold of 1 ms lasts "
        "1 to 2).", "",
        "| server | database | creates/s | p50 ms | p99 ms | CPU µs/req | statements/req "
        "| creates/s of direct |", "|---|---|---|---|---|---|---|---|"]
    for name, links in latency["table"].items():
        for n, (link, m) in enumerate(links.items()):
            lines.append(f"| {name if n == 0 else ''} | {_way(link)} | {m.rps:,.0f} | "
                         f"{m.p50_ms:.2f} | {m.p99_ms:.2f} | {m.cpu_us:,.0f} | "
                         f"{_statements(m.statements)} | "
                         f"{'-' if m.rps_ratio is None else f'{m.rps_ratio:.2f}x'} |")
    delayed = {name: links["+1 ms"].rps_ratio for name, links in latency["table"].items()}
    ours = delayed.pop("plantstore")
    alone = latency["delay_alone"]
    lines += ["", f"plantstore, creates/s with the database 1 ms away each way / direct: "
                  f"**{ours:.2f}x** (target >= {LATENCY_TARGET}x: "
                  f"{_verdict(ours >= LATENCY_TARGET)})"
                  + "".join(f"; {name} {ratio:.2f}x" for name, ratio in delayed.items())
                  + ". The delay alone (1 ms each way / the proxy holding nothing): "
                  + ", ".join(f"{name} {ratio:.2f}x" for name, ratio in alone.items())
                  + f". The proxy ran on {latency['event_loop']}.", ""]
    return lines


def _way(link):
    """How the report names a way to the database ("direct", "+1 ms")."""
    return "direct" if link == "direct" else f"through the proxy, {link} each way"


def _scale(scale):
    """The list latency with 1,000 and 1,000,000 plants in the store."""
    (s_rps, s_p50, s_p99), (l_rps, l_p50, l_p99) = scale["small"], scale["large"]
    ratio = l_p50 / s_p50
    d_rps, d_p50, d_p99 = scale["deep"]
    return [
        "### Listing as the store grows", "",
        "`GET /plants?limit=100` (the bench user owns every plant):", "",
        "| plants in the store | req/s | p50 ms | p99 ms |", "|---|---|---|---|",
        f"| 1,000 | {s_rps:,.0f} | {s_p50:.2f} | {s_p99:.2f} |",
        f"| 1,000,000 | {l_rps:,.0f} | {l_p50:.2f} | {l_p99:.2f} |",
        f"| 1,000,000, page after id 900,000 | {d_rps:,.0f} | {d_p50:.2f} | {d_p99:.2f} |",
        "",
        f"p50 with 1,000,000 / with 1,000: **{ratio:.2f}x** (target <= {SCALE_TARGET}x: "
        f"{_verdict(ratio <= SCALE_TARGET)}).", "",
    ]


def _webhook(per_backend):
    """Creates with and without a webhook receiver, on each backend: paced
    (one client creating now and then), back to back, and at 8 connections."""
    lines = [
        "## A create with a webhook receiver", "",
        "`POST /plants` with no subscription, and with one whose receiver "
        "(`bench/receiver.py`, on loopback) answers 200 after ~1 ms. Three loads: "
        "*paced*, one connection pausing 10 ms after each answer (a client that "
        "creates now and then: each create's sends end before the next create, "
        "so this is a create's own latency, and the target's measure); "
        "*back to back*, one connection sending the next create at once (it "
        "runs beside the previous create's send, in the same process); and 8 "
        "connections (the cores are saturated, so the sends' CPU shows as "
        "latency too):", "",
        "| database | subscriptions | load | req/s | p50 ms | p99 ms |",
        "|---|---|---|---|---|---|",
    ]
    loads = (("paced", "_paced"), ("back to back", "_alone"), ("8 connections", ""))
    verdicts = []
    for backend, webhook in per_backend.items():
        title = BACKEND_TITLES[backend]
        ratios = []
        for load_name, suffix in loads:
            none, one = webhook["none" + suffix], webhook["one" + suffix]
            for label, (rps, p50, p99) in (("none", none), ("one receiver", one)):
                lines.append(f"| {title} | {label} | {load_name} | {rps:,.0f} | "
                             f"{p50:.2f} | {p99:.2f} |")
            ratios.append(one[1] / none[1])
        verdicts.append(
            f"{title}: p50 with one receiver / with none **{ratios[0]:.2f}x** paced "
            f"(target <= {WEBHOOK_TARGET}x: {_verdict(ratios[0] <= WEBHOOK_TARGET)}), "
            f"{ratios[1]:.2f}x back to back, {ratios[2]:.2f}x at 8 connections; the "
            f"receiver got {webhook['received']:,} deliveries for "
            f"{webhook['created_with_receiver']:,} creates of the measured runs (its "
            "count includes the warm-up).")
    return lines + [""] + [line for verdict in verdicts for line in (verdict, "")]


LIMITER_TARGET = 0.95


def _limiter(limiter):
    """GET /plants?limit=10 without and with a rate limit that is never reached."""
    base = limiter["no limit"][0]
    lines = ["## What the rate limiter costs", "",
             "`GET /plants?limit=10` without `PLANTSTORE_RATE_LIMIT`, and with a "
             "limit never reached, counted in memory and in Redis (loopback):", "",
             "| rate limit | req/s | p50 ms | p99 ms | req/s of no limit |",
             "|---|---|---|---|---|"]
    for name, (rps, p50, p99) in limiter.items():
        lines.append(f"| {name} | {rps:,.0f} | {p50:.2f} | {p99:.2f} | {rps / base:.3f} |")
    worst = min(rps for rps, _, _ in limiter.values()) / base
    lines += ["", f"Lowest ratio: **{worst:.3f}** (target >= {LIMITER_TARGET}: "
                  f"{_verdict(worst >= LIMITER_TARGET)}).", ""]
    return lines


def _tracing(tracing):
    """Requests with tracing off, and on at two sampling ratios."""
    lines = ["## What tracing costs", "",
             "SQLite, the same server with no `OTEL_*` variable, and with "
             "`OTEL_EXPORTER_OTLP_ENDPOINT` set (spans exported over OTLP/HTTP to a sink "
             "on loopback) and `OTEL_TRACES_SAMPLER=traceidratio` at 1.0 and 0.1:", "",
             "| workload | tracing | req/s | p50 ms | p99 ms | req/s of off |",
             "|---|---|---|---|---|---|"]
    for workload, rows in tracing.items():
        base = rows["tracing off"][0]
        for name, (rps, p50, p99) in rows.items():
            lines.append(f"| {workload} | {name.removeprefix('tracing ')} | {rps:,.0f} | "
                         f"{p50:.2f} | {p99:.2f} | {rps / base:.3f} |")
    return lines + [""]


def _memory(memory):
    """VmRSS per worker over the run."""
    def mb(kib):
        """KiB as MB with one decimal."""
        return f"{kib / 1024:.1f}"
    final = memory["final"]
    half_count, half = memory["half"]
    rows = []
    worst = 0.0
    for pid, kib in final.items():
        warm = memory["warm"].get(pid)
        mid = half.get(pid)
        rows.append(f"| {pid} | {mb(warm) if warm else '-'} | {mb(mid) if mid else '-'} "
                    f"| {mb(kib)} |")
        worst = max(worst, kib / 1024)
    growth = max((final[pid] - half[pid]) / 1024 for pid in final if pid in half) \
        if any(pid in half for pid in final) else float("nan")
    return [
        "## Memory per worker", "",
        f"VmRSS (/proc/<pid>/status) of each gunicorn worker, after a warm-up, "
        f"after {half_count:,} and after {memory['requests']:,} requests "
        "(list of 100, list of 10 and create in turn):", "",
        f"| worker | warm MB | after {half_count:,} MB | after {memory['requests']:,} MB |",
        "|---|---|---|---|", *rows, "",
        f"Largest worker: **{worst:.1f} MB** (target <= {MEMORY_TARGET_MB} MB: "
        f"{_verdict(worst <= MEMORY_TARGET_MB)}); growth over the second half: "
        f"{growth:+.1f} MB.", "",
    ]
