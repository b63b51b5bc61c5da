"""The zero-downtime upgrade: a fleet running the previous release (a git ref,
``FLEET_UPGRADE_FROM``, see release.py) upgraded to this checkout under load,
node by node, by docs/scaling.md's procedure, migrations included:

1. ``plantstore db upgrade --expand`` of the new release: the migrations
   the previous release runs beside;
2. every web node and worker restarted onto the new release, one at a time,
   each drained first (a web node taken out of nginx's upstream, a worker
   SIGTERMed: its attempts under way end and are recorded);
3. ``plantstore db upgrade`` of the new release: the migrations that need
   every node on it.

The receiver fails the first attempt of every event, so that the workers
retry every event the web nodes announce: deliveries written by one release
are claimed and finished by the other, in both directions, throughout.

Run it alone with ``make test-fleet FLEET_ONLY=upgrade``.
"""
import time

import pytest

from .checks import (
    Checks,
    answered_ids,
    check_answers,
    check_deliveries,
    check_only_200s,
    check_plants_stored,
    run_load,
    say,
)
from .deployment import WEB_NODES, WORKERS, children, creates_in_log
from .load import RetryPolicy
from .processes import Deadline, run, wait_until
from .release import CURRENT, PREVIOUS_RELEASE

ROLL_ORDER = ("web1", "worker1", "web2", "worker2")
"""Web nodes and workers alternate: from the first restart to the last, old
and new code run side by side on both ends of the queue."""
CLIENT_RATE = 25
"""Creates a second per client (8 clients): load the workers' retries keep up with."""
CREATES_PER_STEP = 100
"""Creates answered between two steps of the upgrade, so that every mix of
old and new nodes serves load."""
STEP_TIMEOUT = 60
"""Longest a step waits for those creates (a few seconds expected)."""
RUNS_TIMEOUT = 30
"""Longest a process just started may take to exec its program (milliseconds expected)."""
UPGRADE_TIMEOUT = 600
"""The scenario's time limit, its fleet's set-up included (about 2 minutes on
two busy cores; setup.cfg's 300 s is for the tests of ``make test``)."""


def processes_of(fleet, node):
    """Pids of ``node``'s processes: the main one and its children (gunicorn's workers)."""
    main = fleet.processes[node].pid
    return [main, *children(main)]


def not_running(fleet, node, release):
    """``node``'s processes that do not run ``release`` (all, if it has ended)."""
    pids = processes_of(fleet, node)
    if not fleet.processes[node].alive():
        return pids
    return [pid for pid in pids if not release.runs(pid)]


def check_runs(checks, fleet, release, nodes):
    """Every process of every node in ``nodes`` runs ``release`` (a process
    just started may still be between its fork and its exec: it is given
    RUNS_TIMEOUT to show its program)."""
    for node in nodes:
        try:
            wait_until(lambda: not not_running(fleet, node, release),  # noqa: B023 (called here)
                       RUNS_TIMEOUT, "", interval=0.05)
        except Deadline:
            checks.expect(False, f"{node} does not run {release.name}: processes "
                                 f"{not_running(fleet, node, release)} of "
                                 f"{processes_of(fleet, node)}")


def expand(fleet):
    """Step 1: the new release's migrations that the previous release runs
    beside. A release whose ``db upgrade`` has no ``--expand`` splits none
    of its migrations so: each keeps the release before working (the rule
    docs/scaling.md sets for every migration), so its plain ``db upgrade``
    is this step, and step 3 finds nothing left to apply."""
    usage = fleet.plantstore("db", "upgrade", "--help", release=CURRENT)
    argv = ["db", "upgrade", "--expand"] if "--expand" in usage else ["db", "upgrade"]
    return " ".join(["plantstore", *argv]), fleet.plantstore(*argv, release=CURRENT)


def wait_for_creates(load, count, step):
    """Wait until the load has ``count`` more creates answered."""
    target = load.answered() + count
    wait_until(lambda: load.answered() >= target, STEP_TIMEOUT,
               f"{count} creates not answered {step}")


def timed(function, *args, **options):
    """``function(*args, **options)`` and the seconds it took."""
    began = time.monotonic()
    result = function(*args, **options)
    return result, round(time.monotonic() - began, 2)


def upgrade(fleet, load):
    """docs/scaling.md's three steps, onto this checkout, while ``load`` runs;
    when each node was restarted, and the log of its process before."""
    wait_for_creates(load, CREATES_PER_STEP, "on the previous release")
    (command, output), seconds = timed(expand, fleet)
    say(f"1. {command}: {output.splitlines()} in {seconds} s")
    restarted_at, previous_logs = {}, {}
    for node in ROLL_ORDER:
        wait_for_creates(load, CREATES_PER_STEP, f"before {node}'s restart")
        previous_logs[node] = fleet.processes[node].log_path
        if node in WEB_NODES:
            steps = fleet.restart_node(node, CURRENT)
            say(f"2. {node} onto this checkout: {steps} (seconds per step)")
        else:
            stopped = fleet.restart_worker(node, CURRENT)
            say(f"2. {node} onto this checkout: stopped gracefully in {stopped} s, started")
        restarted_at[node] = time.time()
    wait_for_creates(load, CREATES_PER_STEP, "with every node on this checkout")
    output, seconds = timed(fleet.plantstore, "db", "upgrade", release=CURRENT)
    say(f"3. plantstore db upgrade: {output.splitlines()} in {seconds} s")
    wait_for_creates(load, CREATES_PER_STEP, "after the last migrations")
    return restarted_at, previous_logs


@pytest.mark.timeout(UPGRADE_TIMEOUT)
def test_zero_downtime_upgrade(previous_release_fleet):
    """The previous release upgraded to this checkout under load: no answer
    but a 2xx, no event lost, none under way twice at once, and every node
    ends on the new release, having served."""
    fleet, checks = previous_release_fleet, Checks()
    previous = fleet.release
    commit = run(["git", "rev-parse", "--short=12", "HEAD"]).strip()
    say(f"from {PREVIOUS_RELEASE} ({previous.name}) to this checkout ({commit})")
    check_runs(checks, fleet, previous, (*WEB_NODES, *WORKERS))
    fleet.start_receiver("upgrade", fail_first=True)
    load = run_load(fleet, clients=8, per_client_rate=CLIENT_RATE,
                    retry=RetryPolicy(attempts=5, seconds=30, answers=False))
    try:
        restarted_at, previous_logs = upgrade(fleet, load)
    finally:
        load.stop()

    check_answers(checks, load)
    check_only_200s(checks, load)
    check_plants_stored(checks, fleet, load)
    attempts = check_deliveries(checks, fleet, answered_ids(load))
    check_runs(checks, fleet, CURRENT, ROLL_ORDER)
    before = {node: creates_in_log(previous_logs[node]) for node in WEB_NODES}
    after = fleet.creates_served()
    say(f"creates served per web node, previous release: {before}, this checkout: {after}")
    for node in WEB_NODES:
        checks.expect(before[node] > 0 and after[node] > 0,
                      f"{node} did not serve creates on both releases: "
                      f"{before[node]} before, {after[node]} after its restart")
    retries = [attempt for attempt in attempts if attempt.nth > 1]
    by_release = {}
    for worker in WORKERS:
        mine = [a for a in retries if fleet.host_of(a.peer) == worker]
        by_release[worker] = {"previous": sum(a.arrived < restarted_at[worker] for a in mine),
                              "this checkout": sum(a.arrived >= restarted_at[worker]
                                                   for a in mine)}
        checks.expect(by_release[worker]["this checkout"] > 0,
                      f"{worker} sent no retry on this checkout")
    say(f"retries per worker and release: {by_release}")
    checks.verify()
