"""How long a ``plantstore`` command takes to start: ``plantstore --help``
and ``plantstore worker --once`` on an empty (migrated) SQLite database,
each run ``BENCH_START_RUNS`` times (default 21), against the bar of
``BAR_SECONDS``; beside them, the floor: a bare Python importing the
libraries the worker delivers with (``WORKER_LIBRARIES``) and nothing else.

Per command: the median wall-clock time from exec to exit, and the median
CPU (user + system) the process used, which moves less with whatever else
the machine runs. Runs alternate between the commands, so a burst of load
falls on all. The package's modules are compiled first, as an install
compiles them (a checkout under ``PYTHONDONTWRITEBYTECODE`` would otherwise
compile them at every start). ``python -X importtime`` says where a slow
start goes.
"""
import compileall
import os
import pathlib
import resource
import statistics
import subprocess
import time

BAR_SECONDS = 0.2
"""What a command may take to start (docs/benchmarking.md, "Start-up")."""

COMMANDS = {"plantstore --help": ("--help",),
            "plantstore worker --once": ("worker", "--once")}

WORKER_LIBRARIES = ("click", "requests", "peewee", "prometheus_client", "cryptography.fernet",
                    "opentelemetry.trace", "sqlite3")
"""What the worker cannot start without: its command line, HTTP client,
database layer, metrics, keys, tracing API and SQLite driver."""

FLOOR = f"python -c 'import {', '.join(WORKER_LIBRARIES)}'"

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "plantstore"


def _run_once(argv, env, cwd):
    """Run ``argv`` to its end; (wall seconds, CPU seconds)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, check=True, timeout=60,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def measure_start_up(venv_bin, workdir, runs):
    """Median wall and CPU seconds of each command of ``COMMANDS``, and of the
    ``FLOOR``, over ``runs``."""
    compileall.compile_dir(str(PACKAGE), quiet=1)
    url = f"sqlite:///{workdir}/start-up.db"
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PLANTSTORE_", "PROMETHEUS_", "OTEL_"))}
    env["PLANTSTORE_DATABASE_URL"] = url
    program = venv_bin / "plantstore"
    subprocess.run([str(program), "db", "upgrade"], env=env, cwd=workdir, check=True,
                   capture_output=True, timeout=120)
    argvs = {name: [str(program), *args] for name, args in COMMANDS.items()}
    argvs[FLOOR] = [str(venv_bin / "python"), "-c", f"import {', '.join(WORKER_LIBRARIES)}"]
    times = {name: [] for name in argvs}
    for _ in range(runs):
        for name, argv in argvs.items():
            times[name].append(_run_once(argv, env, workdir))
    return {name: {"wall": statistics.median(wall for wall, _ in samples),
                   "cpu": statistics.median(cpu for _, cpu in samples),
                   "runs": len(samples)}
            for name, samples in times.items()}


def render(start_up):
    """The report's section: each command's medians against the bar."""
    runs = next(iter(start_up.values()))["runs"]
    lines = ["## Start-up", "",
             f"A command from exec to exit, on an empty SQLite database: the median of "
             f"{runs} runs (`bench/start_up.py`), against the bar of {BAR_SECONDS} s. The "
             "last row is the floor: the libraries the worker delivers with, imported by "
             "a bare Python in the same runs.", "",
             "| command | wall s | CPU s | within the bar |", "|---|---|---|---|"]
    for name, figures in start_up.items():
        within = "yes" if figures["wall"] <= BAR_SECONDS else "no"
        lines.append(f"| `{name}` | {figures['wall']:.3f} | {figures['cpu']:.3f} | {within} |")
    return lines + [""]
