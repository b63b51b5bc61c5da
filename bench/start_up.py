"""How long a ``plantstore`` command takes to start: ``plantstore --help``
and ``plantstore worker --once`` on an empty (migrated) SQLite database,
each run ``BENCH_START_RUNS`` times (default 21), against the bar of
``BAR_SECONDS``.

Per command: the median wall-clock time from exec to exit, and the median
CPU (user + system) the process used, which moves less with whatever else
the machine runs. Runs alternate between the commands, so a burst of load
falls on both. ``python -X importtime`` says where a slow start goes.
"""
import os
import resource
import statistics
import subprocess
import time

BAR_SECONDS = 0.2
"""What a command may take to start (docs/benchmarking.md, "Start-up")."""

COMMANDS = {"plantstore --help": ("--help",),
            "plantstore worker --once": ("worker", "--once")}


def _run_once(program, args, env, cwd):
    """Run ``program ARGS`` to its end; (wall seconds, CPU seconds)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([str(program), *args], env=env, cwd=cwd, check=True, timeout=60,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def measure_start_up(venv_bin, workdir, runs):
    """Median wall and CPU seconds of each command of ``COMMANDS`` over ``runs``."""
    url = f"sqlite:///{workdir}/start-up.db"
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PLANTSTORE_", "PROMETHEUS_", "OTEL_"))}
    env["PLANTSTORE_DATABASE_URL"] = url
    program = venv_bin / "plantstore"
    subprocess.run([str(program), "db", "upgrade"], env=env, cwd=workdir, check=True,
                   capture_output=True, timeout=120)
    times = {name: [] for name in COMMANDS}
    for _ in range(runs):
        for name, args in COMMANDS.items():
            times[name].append(_run_once(program, args, env, workdir))
    return {name: {"wall": statistics.median(wall for wall, _ in samples),
                   "cpu": statistics.median(cpu for _, cpu in samples),
                   "runs": len(samples)}
            for name, samples in times.items()}


def render(start_up):
    """The report's section: each command's medians against the bar."""
    runs = next(iter(start_up.values()))["runs"]
    lines = ["## Start-up", "",
             f"A command from exec to exit, on an empty SQLite database: the median of "
             f"{runs} runs (`bench/start_up.py`), against the bar of {BAR_SECONDS} s.", "",
             "| command | wall s | CPU s | within the bar |", "|---|---|---|---|"]
    for name, figures in start_up.items():
        within = "yes" if figures["wall"] <= BAR_SECONDS else "no"
        lines.append(f"| `{name}` | {figures['wall']:.3f} | {figures['cpu']:.3f} | {within} |")
    return lines + [""]
