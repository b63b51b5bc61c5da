"""``python bench/ab.py``: plantstore under two (or more) gunicorn set-ups, side by side.

Runs plantstore twice on the same seeded database, with the environment of
set-up A and of set-up B (``AB_A`` and ``AB_B``, each ``NAME=VALUE``
pairs separated by spaces, e.g. ``AB_A="GUNICORN_CMD_ARGS=--http-parser=python"``),
each served from a working tree (``AB_A_CHECKOUT`` and ``AB_B_CHECKOUT``;
default this one), alternating wrk runs of every workload, and prints the
medians of paired ratios B / A of req/s and of the server's CPU per request,
and each set-up's p50 and p99. ``AB_C`` to ``AB_F``, when set, are more
set-ups in the same alternation, each compared with A (how the server
model was chosen: docs/performance.md). ``AB_NGINX=1`` puts a real nginx
with the project's site in front of each (bench/nginx_front.py); the CPU
is still the app server's.
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
import nginx_front
import run
import seed
import servers

MORE_SETUPS = "CDEF"


def setup_env(text):
    """``NAME=VALUE NAME=VALUE`` as a dict (a value runs to the next space)."""
    return dict(pair.split("=", 1) for pair in text.split())


def main():
    names = ["A", "B"] + [name for name in MORE_SETUPS if os.environ.get(f"AB_{name}")]
    envs = {name: setup_env(os.environ.get(f"AB_{name}", "")) for name in names}
    checkouts = {name: Path(os.environ.get(f"AB_{name}_CHECKOUT") or servers.REPO)
                 .expanduser().resolve() for name in names}
    for name, checkout in checkouts.items():
        if not (checkout / "config" / "gunicorn.conf.py").exists():
            raise SystemExit(f"AB_{name}_CHECKOUT={checkout}: not a plantstore working tree")
    behind_nginx = os.environ.get("AB_NGINX") == "1"
    backend_name = databases.chosen(False)[0]
    runner = run.Runner(load.ensure_wrk(), run.env_int("BENCH_SECONDS", 5))
    rounds = run.env_int("BENCH_ROUNDS", 5)
    workdir = Path(tempfile.mkdtemp(prefix="plantstore-ab-"))
    backend = databases.backend(backend_name, workdir)
    started = []
    try:
        url = backend.url("ab")
        token = seed.seed_plantstore(url, run.PLANTS)
        contenders = []
        for name in names:
            server = run.start(servers.plantstore(
                url, workdir, run.VENV_BIN, name=f"ab-{name}", env=envs[name],
                checkout=checkouts[name]), started)
            if behind_nginx:
                front = nginx_front.NginxFront(server.port, workdir, name).start()
                started.append(front)
                server = nginx_front.Fronted(server, front)
            contenders.append(run.Contender(name, server, token))
        table = run.compare(runner, contenders, rounds)  # ratios: A (the first) / each
    finally:
        for server in started:
            server.stop()
        backend.close()
    print(f"\n{backend_name}{', behind nginx' if behind_nginx else ''}:")
    for name in names:
        print(f"  {name} = {envs[name] or 'defaults'} in {checkouts[name]}")
    for workload, measured in table.items():
        a = measured["A"]
        print(f"  {workload:<24} A {a.rps:7.0f} req/s {a.cpu_us:6.0f} µs CPU/req "
              f"p50 {a.p50_ms:.2f} p99 {a.p99_ms:.2f} ms")
        for name in names[1:]:
            b = measured[name]
            print(f"  {'':<24} {name} {b.rps:7.0f} req/s {b.cpu_us:6.0f} µs CPU/req "
                  f"p50 {b.p50_ms:.2f} p99 {b.p99_ms:.2f} ms   {name}/A (medians of paired "
                  f"runs) req/s {1 / b.rps_ratio:.2f}x, CPU/req {1 / b.cpu_ratio:.2f}x")


if __name__ == "__main__":
    main()
