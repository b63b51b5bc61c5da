"""Fixtures of the fleet test (``make test-fleet``; see fleet.py for the hosts).

The fleet is built once per database path, ``direct`` (the nodes talk to
PostgreSQL) and ``pgbouncer`` (through PgBouncer in transaction pooling
mode), and every scenario runs on both. It is torn down whatever happens:
a failure, Ctrl-C, SIGTERM (turned into Ctrl-C here) or the make target's
time limit (SIGINT). A run killed outright leaves namespaces behind that the
next run removes first. With ``FLEET_REPORT=PATH`` the run's figures are
written there as a page (see report.py).
"""
import os
import signal
import time

import pytest

from .deployment import Fleet
from .report import run_report


def pytest_configure(config):
    if os.geteuid() != 0:
        pytest.exit("the fleet test builds network namespaces: run it as root", returncode=2)
    signal.signal(signal.SIGTERM, signal.default_int_handler)


def pytest_sessionfinish(session):
    if os.environ.get("FLEET_REPORT") and run_report.rows:
        run_report.write(os.environ["FLEET_REPORT"])


def scenario_name(item):
    """``test_clock_skew[direct-+120s]`` as ``clock skew +120s``."""
    params = item.callspec.params if hasattr(item, "callspec") else {}
    words = item.originalname.removeprefix("test_").replace("_", " ")
    return " ".join([words, *(str(value) for name, value in params.items()
                              if name != "fleet")])


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture(scope="module", params=["direct", "pgbouncer"])
def fleet(request):
    """The running fleet, its database reached ``direct`` or through ``pgbouncer``."""
    began = time.monotonic()
    built = Fleet(request.param).start()
    print(f"\n=== fleet up in {time.monotonic() - began:.0f} s, database {request.param} "
          f"({built.database_url})", flush=True)
    try:
        yield built
    finally:
        built.close()


@pytest.fixture
def healthy_fleet(fleet, request):
    """The fleet with every web node and worker running (a scenario before may
    have left one stopped); prints every process's last lines if the test fails."""
    fleet.heal()
    print(f"\n--- {request.node.name}", flush=True)
    run_report.begin(scenario_name(request.node), fleet.through)
    yield fleet
    report = getattr(request.node, "report_call", None)
    run_report.end(passed=report is not None and report.passed)
    if report is not None and report.failed:
        print(f"\n--- logs after {request.node.name}\n{fleet.logs()}", flush=True)
