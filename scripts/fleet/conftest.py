"""Fixtures of the fleet test (``make test-fleet``; see deployment.py for the hosts).

The fleet is built once per database path, ``direct`` (the nodes talk to
PostgreSQL) and ``pgbouncer`` (through PgBouncer in transaction pooling
mode), and every scenario runs on both; the upgrade scenario builds a fleet
of its own on the previous release, per path. A fleet is torn down whatever happens:
a failure, Ctrl-C, SIGTERM (turned into Ctrl-C here) or the make target's
time limit (SIGINT). A run killed outright leaves namespaces behind that the
next run removes first. With ``FLEET_REPORT=PATH`` the run's figures are
written there as a page (see report.py).
"""
import contextlib
import os
import signal
import time

import pytest

from .deployment import Fleet
from .release import PREVIOUS_RELEASE, materialised
from .report import run_report

FLEET_FIXTURES = {"fleet", "previous_release_fleet"}
"""Fixtures whose parameter is the database path (not part of a scenario's name)."""


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
                              if name not in FLEET_FIXTURES)])


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@contextlib.contextmanager
def running_fleet(through, **options):
    """A fleet built for the time of the block, then torn down."""
    began = time.monotonic()
    built = Fleet(through, **options).start()
    print(f"\n=== fleet up in {time.monotonic() - began:.0f} s, database {through} "
          f"({built.database_url}), on {built.release.name}", flush=True)
    try:
        yield built
    finally:
        built.close()


@contextlib.contextmanager
def scenario(fleet, request):
    """A scenario on ``fleet``: its figures kept for the run's report, every
    process's last lines printed if it fails."""
    print(f"\n--- {request.node.name}", flush=True)
    run_report.begin(scenario_name(request.node), fleet.through)
    yield fleet
    report = getattr(request.node, "report_call", None)
    run_report.end(passed=report is not None and report.passed)
    if report is not None and report.failed:
        print(f"\n--- logs after {request.node.name}\n{fleet.logs()}", flush=True)


@pytest.fixture(scope="module", params=["direct", "pgbouncer"])
def fleet(request):
    """The running fleet, its database reached ``direct`` or through ``pgbouncer``."""
    with running_fleet(request.param) as built:
        yield built


@pytest.fixture
def healthy_fleet(fleet, request):
    """The fleet with every web node and worker running (a scenario before may
    have left one stopped)."""
    fleet.heal()
    with scenario(fleet, request):
        yield fleet


@pytest.fixture(scope="session")
def previous_release():
    """The release before this checkout (``FLEET_UPGRADE_FROM``, see
    release.py), with a virtualenv of its own, for the session."""
    began = time.monotonic()
    with materialised(PREVIOUS_RELEASE) as release:
        print(f"\n=== release {PREVIOUS_RELEASE} ({release.name}) installed in "
              f"{release.tree.parent} in {time.monotonic() - began:.0f} s", flush=True)
        yield release


@pytest.fixture(params=["direct", "pgbouncer"])
def previous_release_fleet(previous_release, request):
    """A fleet of its own whose web nodes and workers run the previous release
    (migrated by its ``plantstore db upgrade``), for one scenario."""
    with running_fleet(request.param, release=previous_release) as built, \
            scenario(built, request):
        yield built
