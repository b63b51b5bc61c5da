"""``python bench/ab.py``: plantstore under two gunicorn set-ups, side by side.

Runs plantstore twice on the same seeded database, with the environment of
set-up A and of set-up B (``AB_A`` and ``AB_B``, each ``NAME=VALUE``
pairs separated by spaces, e.g. ``AB_A="GUNICORN_CMD_ARGS=--http-parser=python"``),
each served from a working tree (``AB_A_CHECKOUT`` and ``AB_B_CHECKOUT``;
default this one), alternating wrk runs of every workload, and prints the
medians of paired ratios B / A of req/s and of the server's CPU per request.
``BENCH_DATABASE`` (sqlite or postgres), ``BENCH_SECONDS`` and
``BENCH_ROUNDS`` apply as in ``make bench``. This is how the choices in
config/gunicorn.conf.py (worker class, threads, HTTP parser) are measured,
and a change to the code against the code without it (a ``git worktree``).

A checkout is served with its own config from its own directory: gunicorn
imports the package while reading the config, before a ``--chdir`` takes
effect, so ``--chdir`` alone would serve this tree's package.
"""
import os
import tempfile
from pathlib import Path

import databases
import load
import run
import seed
import servers


def setup_env(text):
    """``NAME=VALUE NAME=VALUE`` as a dict (a value runs to the next space)."""
    return dict(pair.split("=", 1) for pair in text.split())


def main():
    a_env, b_env = setup_env(os.environ.get("AB_A", "")), setup_env(os.environ.get("AB_B", ""))
    checkouts = {name: Path(os.environ.get(f"AB_{name}_CHECKOUT") or servers.REPO)
                 .expanduser().resolve() for name in ("A", "B")}
    for name, checkout in checkouts.items():
        if not (checkout / "config" / "gunicorn.conf.py").exists():
            raise SystemExit(f"AB_{name}_CHECKOUT={checkout}: not a plantstore working tree")
    backend_name = databases.chosen(False)[0]
    runner = run.Runner(load.ensure_wrk(), run.env_int("BENCH_SECONDS", 5))
    rounds = run.env_int("BENCH_ROUNDS", 5)
    workdir = Path(tempfile.mkdtemp(prefix="plantstore-ab-"))
    backend = databases.backend(backend_name, workdir)
    started = []
    try:
        url = backend.url("ab")
        token = seed.seed_plantstore(url, run.PLANTS)
        contenders = [
            run.Contender(name, run.start(servers.plantstore(
                url, workdir, run.VENV_BIN, name=f"ab-{name}", env=env,
                checkout=checkouts[name]), started), token)
            for name, env in (("A", a_env), ("B", b_env))]
        table = run.compare(runner, contenders, rounds)  # ratios: A (the first) / B
    finally:
        for server in started:
            server.stop()
        backend.close()
    print(f"\n{backend_name}: A = {a_env or 'defaults'} in {checkouts['A']}, "
          f"B = {b_env or 'defaults'} in {checkouts['B']}")
    for workload, measured in table.items():
        a, b = measured["A"], measured["B"]
        print(f"  {workload:<24} A {a.rps:7.0f} req/s {a.cpu_us:6.0f} µs CPU/req   "
              f"B {b.rps:7.0f} req/s {b.cpu_us:6.0f} µs CPU/req   B/A (medians of paired "
              f"runs) req/s {1 / b.rps_ratio:.2f}x, CPU/req {1 / b.cpu_ratio:.2f}x")


if __name__ == "__main__":
    main()
