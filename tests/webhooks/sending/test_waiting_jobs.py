"""The jobs waiting for a sending slot: lines per receiver, counted in all
and per owner, whatever way they leave."""
import dataclasses

from plantstore.webhooks.sending.waiting_jobs import WaitingJobs


@dataclasses.dataclass(frozen=True)
class Job:
    subscription_id: int
    owner_key: int
    n: int


def test_lines_keep_claim_order_and_counts_follow_every_way_out():
    waiting = WaitingJobs()
    jobs = [Job(1, 10, 0), Job(2, 10, 1), Job(1, 10, 2), Job(3, 20, 3)]
    for job in jobs:
        waiting.add(job)
    assert list(waiting.of(1)) == [jobs[0], jobs[2]] and waiting.of(9) == ()
    assert (waiting.count, dict(waiting.owners)) == (4, {10: 3, 20: 1})
    assert waiting.take_receivers(1) == [jobs[0], jobs[2]]
    assert (waiting.count, dict(waiting.owners)) == (2, {10: 1, 20: 1})
    waiting.uncount(waiting.lines[3].popleft())
    assert (waiting.count, dict(waiting.owners)) == (1, {10: 1})
    assert waiting.take_all() == [jobs[1]]
    assert (waiting.lines, waiting.count, dict(waiting.owners)) == ({}, 0, {})
