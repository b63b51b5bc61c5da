"""What the fleet's receiver recorded (see ``receiver.py``), and what it shows:
which webhook-ids were under way twice at the same moment, which plants were
delivered, who sent what."""
import collections
import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Attempt:
    """One attempt as the receiver saw it (times: the receiver's clock)."""

    id: str
    plant: int
    peer: str
    arrived: float
    finished: float
    status: int
    timestamp: str
    nth: int

    @property
    def ok(self):
        return 200 <= self.status < 300


@dataclass(frozen=True)
class Overlap:
    """Two attempts of one webhook-id under way at once, for ``seconds``."""

    first: Attempt
    second: Attempt

    @property
    def seconds(self):
        return min(self.first.finished, self.second.finished) - self.second.arrived


def read(path):
    """Every attempt recorded in ``path`` (none if it does not exist yet)."""
    try:
        with open(path, encoding="utf-8") as recorded:
            lines = recorded.read().splitlines()
    except FileNotFoundError:
        return []
    # The last line may be half-written while the receiver runs.
    return [Attempt(**json.loads(line)) for line in lines if line.endswith("}")]


def overlaps(attempts):
    """Every pair of attempts of one webhook-id whose time under way overlaps:
    the later one arrived before the earlier one was answered."""
    found = []
    by_id = collections.defaultdict(list)
    for attempt in attempts:
        by_id[attempt.id].append(attempt)
    for same_id in by_id.values():
        same_id.sort(key=lambda attempt: attempt.arrived)
        for index, later in enumerate(same_id):
            found.extend(Overlap(earlier, later) for earlier in same_id[:index]
                         if earlier.finished > later.arrived)
    return found


def describe(overlap, host_of):
    """One line naming the webhook-id, both senders and the overlap."""
    first, second = overlap.first, overlap.second
    return (f"{first.id} (plant {first.plant}): {host_of(first.peer)} "
            f"[{first.arrived:.3f}, {first.finished:.3f}] and {host_of(second.peer)} "
            f"[{second.arrived:.3f}, {second.finished:.3f}]: "
            f"under way together {overlap.seconds * 1000:.1f} ms")


def delivered_plants(attempts):
    """Plant ids some attempt delivered (2xx)."""
    return {attempt.plant for attempt in attempts if attempt.ok}


def ids_by_plant(attempts):
    """Plant id -> the distinct webhook-ids its attempts carried."""
    ids = collections.defaultdict(set)
    for attempt in attempts:
        ids[attempt.plant].add(attempt.id)
    return ids


def senders(attempts, host_of):
    """How many attempts each sending host made."""
    return collections.Counter(host_of(attempt.peer) for attempt in attempts)
