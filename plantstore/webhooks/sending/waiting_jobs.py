"""The claimed jobs waiting in a worker for a sending slot (see ``slots``):
kept per receiver in claim order, counted in all and per owner."""
import collections


class WaitingJobs:
    """The jobs claimed ahead that wait for a slot. Not locked itself: the
    ``Slots`` that owns it reads and changes it under its own lock."""

    def __init__(self):
        self.lines = {}  # subscription id -> its jobs, in claim order
        self.count = 0
        self.owners = collections.Counter()  # owner key -> its jobs waiting

    def add(self, job):
        """Keep ``job`` at the end of its receiver's line."""
        self.lines.setdefault(job.subscription_id, collections.deque()).append(job)
        self.count += 1
        self.owners[job.owner_key] += 1

    def uncount(self, job):
        """Count ``job``, taken out of its line, as no longer waiting."""
        self.count -= 1
        self.owners[job.owner_key] -= 1
        if not self.owners[job.owner_key]:
            del self.owners[job.owner_key]

    def of(self, subscription_id):
        """The jobs waiting for ``subscription_id``'s slots (empty if none)."""
        return self.lines.get(subscription_id, ())

    def take_receivers(self, subscription_id):
        """Every job waiting for ``subscription_id``, no longer waiting."""
        jobs = list(self.lines.pop(subscription_id, ()))
        for job in jobs:
            self.uncount(job)
        return jobs

    def take_all(self):
        """Every waiting job, no longer waiting."""
        jobs = [job for line in self.lines.values() for job in line]
        self.lines, self.count = {}, 0
        self.owners.clear()
        return jobs
