"""What every fleet scenario checks, and how it prints its figures: the
answers the load got, the plants stored, the events the receiver got (each
plant's, none under way twice at once). Each check adds what failed to a
scenario's ``Checks``, which reports all of it together."""
import collections
import time

from . import records
from .load import Load, PlantIds, failures, figures
from .processes import Deadline, wait_until
from .report import run_report

DELIVERY_TIMEOUT = 90
"""Longest the scenarios wait for every event to reach the receiver."""

plant_ids = PlantIds(1)


class Checks:
    """The properties a scenario checks; all failures reported together."""

    def __init__(self):
        self.failed = []

    def expect(self, holds, message):
        if not holds:
            self.failed.append(message)
        return holds

    def verify(self):
        assert not self.failed, "\n".join(["the fleet broke a promise:", *self.failed])


def say(*lines):
    """Print a scenario's figures, and keep them for the run's report."""
    for line in lines:
        print(f"    {line}", flush=True)
        run_report.line(line)


def run_load(fleet, **options):
    return Load(fleet.network, "client", fleet.base_url, fleet.token, plant_ids,
                **options).start()


def keep_running(seconds):
    """Let the scenario's load run for ``seconds`` (its length, not a wait for state)."""
    time.sleep(seconds)


def answered_ids(load):
    return {create.plant_id for create in load.creates if create.ok}


def check_answers(checks, load):
    """Every create's final answer is a 200."""
    say(*figures(load))
    bad = [create for create in load.creates if not create.ok]
    checks.expect(not bad, f"{len(bad)} of {len(load.creates)} creates did not end in a "
                           "200:\n      " + "\n      ".join(failures(load.creates)))


def check_deliveries(checks, fleet, plants, timeout=DELIVERY_TIMEOUT):
    """Every plant of ``plants`` reached the receiver (2xx), the queue emptied,
    each plant has one event, and no webhook-id was under way twice at once.
    Returns the scenario's attempts as the receiver saw them."""
    plants = set(plants)

    def delivered_all():
        return plants <= records.delivered_plants(records.read(fleet.receiver_log))
    try:
        wait_until(delivered_all, timeout, "events missing", interval=0.2)
        fleet.wait_queue_empty(timeout)
    except Deadline:
        pass  # reported below, with the ids
    attempts = [attempt for attempt in records.read(fleet.receiver_log)
                if attempt.plant in plants]
    missing = plants - records.delivered_plants(attempts)
    checks.expect(not missing, f"{len(missing)} of {len(plants)} plants never reached the "
                               f"receiver, e.g. {sorted(missing)[:10]}")
    pending = fleet.pending()
    checks.expect(pending == 0, f"{pending} deliveries still pending after {timeout} s")
    twice = fleet.query(
        "SELECT (payload::json->>'id')::bigint, count(*) FROM delivery "
        "WHERE (payload::json->>'id')::bigint = ANY(%s) GROUP BY 1 HAVING count(*) > 1",
        list(plants))
    checks.expect(not twice, f"{len(twice)} plants have more than one event (created "
                             f"twice?): {twice[:10]}")
    overlapping = records.overlaps(attempts)
    checks.expect(not overlapping, f"{len(overlapping)} times a webhook-id was under way "
                                   "twice at once:\n      " + "\n      ".join(
                                       records.describe(overlap, fleet.host_of)
                                       for overlap in overlapping[:20]))
    per_id = collections.Counter(attempt.id for attempt in attempts if attempt.ok)
    say(f"receiver: {len(attempts)} attempts for {len(plants)} plants, by sender "
        f"{dict(sorted(records.senders(attempts, fleet.host_of).items()))}; "
        f"delivered more than once (at least once, not at once): "
        f"{sum(count > 1 for count in per_id.values())}; under way twice at once: "
        f"{len(overlapping)}; deliveries {fleet.deliveries_by_status()}")
    return attempts


def check_plants_stored(checks, fleet, load):
    """Every create answered 200 is in the database."""
    answered = answered_ids(load)
    stored = {row[0] for row in fleet.query("SELECT id FROM plant WHERE id = ANY(%s)",
                                            list(answered))}
    lost = answered - stored
    checks.expect(not lost, f"{len(lost)} plants answered 200 are not stored: "
                            f"{sorted(lost)[:10]}")




def check_only_200s(checks, load):
    """Every answer the load got, retries included, is a 200; a connection
    closed as a create went out on it (an nginx reload closing its idle
    kept-alive connections) got no answer at all: counted apart, its create
    sent again under its Idempotency-Key."""
    answers = [answer for create in load.creates for answer in create.answers]
    closed = [answer for answer in answers if answer.closed_under_request]
    say(f"connections nginx's reloads closed under a create: {len(closed)}, each sent "
        "again under its Idempotency-Key")
    other = collections.Counter(answer.label for answer in answers
                                if answer.status != 200 and not answer.closed_under_request)
    checks.expect(not other, f"answers other than 200: {dict(other)}")
