"""The sending slots of one process, shared fairly between receivers and owners.

A process makes at most ``total`` attempts at once. One subscription holds
at most ``per_receiver`` of them (never more than ``total``). One owner (a
user's subscriptions together; the operator's subscriptions count as one
owner) holds at most its share: the slots, less one kept free for an owner
that holds none, divided between the owners that hold slots (at least one
each). A slow receiver keeps its slots longer, so it uses up its own share
and its owner's, never anyone else's.
"""
import collections
import dataclasses
import threading


@dataclasses.dataclass(frozen=True)
class Room:
    """How many more attempts a process takes now: in all, per receiver and
    per owner (the maps name those with slots held; others get the default),
    and how many slots had been released when it was read."""
    free: int
    receiver_default: int
    owner_default: int
    receivers: dict  # subscription id -> attempts it may still take
    owners: dict  # owner key -> attempts it may still take
    releases: int


class Slots:
    """Counts the slots held, and decides who may take one."""

    def __init__(self, total, per_receiver):
        self.total = total
        self.per_receiver = min(per_receiver, total)
        self._changed = threading.Condition()
        self._receivers = collections.Counter()
        self._owners = collections.Counter()
        self._held = 0
        self._releases = 0  # ever, so that a waiter can tell whether one came since

    def _share(self, owners):
        """The most slots one of ``owners`` owners may hold."""
        spare = 1 if self.total > 1 else 0
        return max(1, (self.total - spare) // max(1, owners))

    def try_take(self, job):
        """Take a slot for ``job`` if it may have one now; whether it did."""
        with self._changed:
            owners = len(self._owners) + (job.owner_key not in self._owners)
            if (self._held >= self.total
                    or self._receivers[job.subscription_id] >= self.per_receiver
                    or self._owners[job.owner_key] >= self._share(owners)):
                return False
            self._held += 1
            self._receivers[job.subscription_id] += 1
            self._owners[job.owner_key] += 1
            return True

    def release(self, job):
        """Give back ``job``'s slot (its attempt ended)."""
        with self._changed:
            self._held -= 1
            self._releases += 1
            for counter, key in ((self._receivers, job.subscription_id),
                                 (self._owners, job.owner_key)):
                counter[key] -= 1
                if not counter[key]:
                    del counter[key]
            self._changed.notify_all()

    def held(self):
        """How many slots are held."""
        with self._changed:
            return self._held

    def room(self):
        """What the process may take now (see ``Room``)."""
        with self._changed:
            share = self._share(len(self._owners))
            return Room(
                free=self.total - self._held,
                receiver_default=self.per_receiver,
                owner_default=self._share(len(self._owners) + 1),
                receivers={sid: self.per_receiver - n for sid, n in self._receivers.items()},
                owners={owner: max(0, share - n) for owner, n in self._owners.items()},
                releases=self._releases)

    def wait_for_release(self, since, timeout):
        """Wait until a slot is released after ``since`` (a ``Room``'s
        ``releases``): at once if one was already; False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: self._releases != since, timeout)

    def wait_until_idle(self, timeout):
        """Wait until no slot is held; False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._held, timeout)

    def reset(self):
        """Forget every slot (a forked child holds none of its parent's)."""
        with self._changed:
            self._receivers.clear()
            self._owners.clear()
            self._held = 0
