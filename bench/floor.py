"""``python bench/floor.py``: plantstore beside the framework's floor.

Runs plantstore, ``flask_floor.py`` (the yardsticks' work as a plain Flask
app, under the same gunicorn worker class and threads) and the two
yardsticks of ../shared/bench, each on its own seeded database, alternating
wrk runs of every workload, and prints each server's CPU per request and
the medians of paired ratios plantstore / each. Where the plain Flask app
alone costs about what the FastAPI peer does, that is the room plantstore's
stack and contract have. ``BENCH_DATABASE`` (sqlite or postgres),
``BENCH_WORKLOADS``, ``BENCH_SECONDS``, ``BENCH_ROUNDS`` and
``BENCH_YARDSTICKS`` apply as in ``make bench``.
"""
import os
import sys
import tempfile
from pathlib import Path

import databases
import load
import run
import seed
import servers

FLOOR = Path(__file__).with_name("flask_floor.py")


def main():
    yardsticks = Path(os.environ.get("BENCH_YARDSTICKS") or run.REPO.parent / "shared" / "bench")
    if not (yardsticks / "ceiling.py").exists():
        sys.exit(f"no yardsticks in {yardsticks} (set BENCH_YARDSTICKS)")
    backend_name = databases.chosen(False)[0]
    runner = run.Runner(load.ensure_wrk(), run.env_int("BENCH_SECONDS", 3))
    rounds = run.env_int("BENCH_ROUNDS", 5)
    workdir = Path(tempfile.mkdtemp(prefix="plantstore-floor-"))
    backend = databases.backend(backend_name, workdir)
    started = []
    try:
        url = backend.url("plantstore")
        token = seed.seed_plantstore(url, run.PLANTS)
        contenders = [run.Contender("plantstore", run.start(servers.plantstore(
            url, workdir, run.VENV_BIN), started), token)]
        floor_url = backend.url("floor")
        floor_token = seed.seed_yardstick(yardsticks / "ceiling.py", floor_url, run.PLANTS)
        floor = servers.ceiling(yardsticks, floor_url, workdir, run.VENV_BIN, name="flask-floor",
                                app="flask_floor:app", env={"PYTHONPATH": str(FLOOR.parent)})
        contenders.append(run.Contender("flask-floor", run.start(floor, started), floor_token))
        contenders += run.start_yardsticks(yardsticks, backend, workdir, started)
        workloads = [key for key in run.chosen_workloads() if key in run.WORKLOADS]
        table = run.compare(runner, contenders, rounds, workloads)
    finally:
        for server in started:
            server.stop()
        backend.close()
    print(f"\n{backend_name}: CPU µs per request (medians), and plantstore's over each "
          "(medians of paired runs)")
    for workload, measured in table.items():
        cells = [f"{name} {summary.cpu_us:5.0f}"
                 + (f" ({summary.cpu_ratio:.2f}x)" if summary.cpu_ratio else "")
                 for name, summary in measured.items()]
        print(f"  {workload:<24} " + "   ".join(cells))


if __name__ == "__main__":
    main()
