"""The sending slots of one process, shared fairly between receivers and
owners, and the claimed jobs waiting for one.

A process makes at most ``total`` attempts at once. One subscription holds
at most ``per_receiver`` of them (never more than ``total``). One slot is
kept free for an owner that holds none (a user's subscriptions together;
the operator's subscriptions count as one owner); the rest are divided
between the owners present (holding slots or with jobs waiting): each
holds at most its share, an equal part, and the remainder goes one slot
each to as many owners, so that N owners with work hold every slot but
the kept one for any N (``_share``). A slow receiver keeps its slots
longer, so it uses up its own share and its owner's, never anyone else's.

A worker also claims ahead (``ahead``): up to ``AHEAD`` slots' worth of
jobs more than its free slots (per receiver and per owner ``AHEAD`` times
their own room more) wait here for a slot, so that its senders never wait
for a claim, and a claim takes many jobs at once. When an attempt ends,
its sender takes the next waiting job that may have the slot, of its own
receiver first, while its owner holds less than its share beside one more
owner (``release``); the rest start in the claiming loop after each claim
(``start_waiting``), so every owner with due deliveries takes its turn for
the slots first; what its claim left of an idle owner's room is lent there
to the owners whose jobs still wait, the fewest held first, never the kept
slot (a borrower gets no slot handed over until it is back under its
share, so the loan ends as its attempts do). A waiting job starts only
while its lease outlasts its attempt (``Job.may_start``); it is given back
unsent when its lease runs short, when an attempt at its receiver fails
(the next claim sees what the failure did: an opened breaker, a 410's
disabling) and when the worker stops. At most ``AHEAD`` slots' worth wait
in all, so the jobs waiting never shrink a claim below the free slots: an
owner whose jobs wait takes no room from another owner's claim.
"""
import collections
import dataclasses
import threading

from .waiting_jobs import WaitingJobs

AHEAD = 2
"""Slots' worth of claimed jobs that may wait in a worker, beyond its slots."""


@dataclasses.dataclass(frozen=True)
class Room:
    """How many more jobs a process takes now: in all, per receiver and per
    owner (the maps name those with slots held or jobs waiting; others get
    the default), and how many slots had been released when it was read."""
    free: int
    subscription_default: int
    owner_default: int
    subscriptions: dict  # subscription id -> jobs it may still take
    owners: dict  # owner key -> jobs it may still take
    releases: int


class Slots:
    """Counts the slots held, decides who may take one, and keeps the jobs
    waiting for one (none unless ``ahead``; they start only while their
    lease outlasts ``send_bound``, the longest an attempt takes)."""

    def __init__(self, total, per_receiver, ahead=False, send_bound=0.0):
        self.total = total
        self.per_receiver = min(per_receiver, total)
        self.ahead = AHEAD if ahead else 0
        self.send_bound = send_bound
        self._changed = threading.Condition()
        self._subscriptions = collections.Counter()
        self._owners = collections.Counter()
        self._held = 0
        self._releases = 0  # ever, so that a waiter can tell whether one came since
        self._wake_at = 0  # the releases the claiming loop waits for (see wait_for_release)
        self._waiting = WaitingJobs()
        self.shared = self.total - (1 if self.total > 1 else 0)
        """The slots an owner that already holds one may take: all but the kept one."""

    def _present(self, owner=None):
        """How many owners hold slots or have jobs waiting, ``owner`` counted too."""
        present = len(self._owners) + sum(1 for key in self._waiting.owners
                                          if key not in self._owners)
        return present + (owner is not None and owner not in self._owners
                          and owner not in self._waiting.owners)

    def _share(self, owner, owners):
        """The most slots ``owner`` may hold beside ``owners`` owners in all
        (itself included): an equal part of the shared slots, and one more
        while fewer other owners than the remainder hold more than that part."""
        part, remainder = divmod(self.shared, max(1, owners))
        if not part:
            return 1
        above = sum(1 for key, held in self._owners.items() if held > part and key != owner)
        return part + (above < remainder)

    def _may_take(self, job):
        """Whether ``job``'s receiver has room, and a slot is free for it:
        the kept one too when its owner holds none."""
        held = self._owners[job.owner_key]
        return (self._held < (self.shared if held else self.total)
                and self._subscriptions[job.subscription_id] < self.per_receiver)

    def _take(self, job):
        self._held += 1
        self._subscriptions[job.subscription_id] += 1
        self._owners[job.owner_key] += 1

    def try_take(self, job):
        """Take a slot for ``job`` if it may have one now; whether it did."""
        with self._changed:
            owner = job.owner_key
            if (not self._may_take(job)
                    or self._owners[owner] >= self._share(owner, self._present(owner))):
                return False
            self._take(job)
            return True

    def wait(self, job):
        """Keep ``job`` until a slot frees for it, if the process claims ahead
        and its receiver has room to wait; whether it waits."""
        with self._changed:
            if (self._waiting.count >= self.ahead * self.total
                    or len(self._waiting.of(job.subscription_id)) >= self.waiting_per_receiver):
                return False
            self._waiting.add(job)
            return True

    def take_or_wait(self, job, may_wait):
        """Place a newly claimed ``job``: take a slot for it if none of its
        receiver's jobs waits (they go first) and one is free, else keep it
        waiting if ``may_wait`` and there is room. Returns ``"slot"``,
        ``"waiting"`` or None (neither: give it back)."""
        with self._changed:
            if not self._waiting.of(job.subscription_id) and self.try_take(job):
                return "slot"
            return "waiting" if may_wait and self.wait(job) else None

    def release(self, job, failed=False, take_next=False):
        """Give back ``job``'s slot (its attempt ended); after a ``failed``
        attempt, the jobs waiting for its receiver are given back too. With
        ``take_next``, the slot goes to the next waiting job that may have it
        (of the same receiver first). Returns (that job with its slot taken,
        or None; the waiting jobs to give back unsent)."""
        with self._changed:
            self._held -= 1
            self._releases += 1
            for counter, key in ((self._subscriptions, job.subscription_id),
                                 (self._owners, job.owner_key)):
                counter[key] -= 1
                if not counter[key]:
                    del counter[key]
            stale = self._waiting.take_receivers(job.subscription_id) if failed else []
            started = (self._start_waiting(job.subscription_id, stale, most=1, handing_over=True)
                       if take_next else [])
            if self._releases >= self._wake_at or not self._held:
                self._changed.notify_all()
            return (started[0] if started else None), stale

    def start_waiting(self):
        """Take a slot for every waiting job that may have one now, then lend
        the shared slots left to the jobs still waiting (``_lend``). Returns
        (those jobs; the jobs whose lease ran short, to give back unsent)."""
        with self._changed:
            stale = []
            started = self._start_waiting(None, stale, most=self.total)
            return started + self._lend(stale), stale

    def _lend(self, stale):
        """Take the shared slots no waiting job may have within its owner's
        share (an idle owner's room) for the jobs still waiting, one at a
        time to the owner holding the fewest, each receiver's in claim order
        and within its cap; those whose lease ran short go to ``stale``."""
        started = []
        lines = self._waiting.lines
        while self._held < self.shared and lines:
            fewest = None
            for subscription_id in list(lines):
                line = lines[subscription_id]
                while line and not line[0].may_start(self.send_bound):
                    stale.append(line.popleft())
                    self._waiting.uncount(stale[-1])
                if not line:
                    del lines[subscription_id]
                elif (self._subscriptions[subscription_id] < self.per_receiver
                      and (fewest is None or self._owners[line[0].owner_key]
                           < self._owners[fewest[0].owner_key])):
                    fewest = line
            if fewest is None:
                break
            job = fewest.popleft()
            self._waiting.uncount(job)
            if not fewest:
                del lines[job.subscription_id]
            self._take(job)
            started.append(job)
        return started

    def _start_waiting(self, preferred_subscription, stale, most, handing_over=False):
        """Take slots for up to ``most`` waiting jobs, ``preferred_subscription``'s
        first, each receiver's in claim order (the oldest lease first); those
        whose lease ran short go to ``stale``. ``handing_over``: see
        ``_may_hand_over``."""
        started, lines = [], self._waiting.lines
        for subscription_id in sorted(lines, key=lambda sid: sid != preferred_subscription):
            line = lines[subscription_id]
            while line and len(started) < most:
                job = line[0]
                if not job.may_start(self.send_bound):
                    stale.append(job)
                elif (not handing_over or self._may_hand_over(job)) and self.try_take(job):
                    started.append(job)
                else:
                    break  # its receiver or owner is full: so for the rest of its line
                self._waiting.uncount(line.popleft())
            if not line:
                del lines[subscription_id]
            if len(started) >= most:
                break
        return started

    def _may_hand_over(self, job):
        """Whether an ended attempt's slot may go straight to waiting ``job``:
        only while its owner holds less than its share beside one more
        owner. The rest of a share is taken in the claiming loop, after its
        claim, where every owner with due deliveries takes its turn: an
        owner's waiting jobs never keep the slots another owner's claim
        would have had."""
        owner = job.owner_key
        return self._owners[owner] < self._share(owner, self._present(owner) + 1)

    def give_up_waiting(self):
        """Every waiting job, no longer waiting (to give back unsent)."""
        with self._changed:
            return self._waiting.take_all()

    def held(self):
        """How many slots are held."""
        with self._changed:
            return self._held

    def waiting(self):
        """How many jobs wait for a slot."""
        with self._changed:
            return self._waiting.count

    @property
    def waiting_per_receiver(self):
        """The most jobs that wait for one receiver's slots."""
        return self.ahead * self.per_receiver

    def room(self, for_waiting=True):
        """What the process may take now (see ``Room``): for its free slots,
        and (unless not ``for_waiting``) for jobs to wait for one."""
        with self._changed:
            rounds = 1 + (self.ahead if for_waiting else 0)
            held = collections.Counter(self._subscriptions)
            owners = collections.Counter(self._owners)
            if rounds > 1:
                for subscription_id, line in self._waiting.lines.items():
                    held[subscription_id] += len(line)
                owners.update(self._waiting.owners)
            present = self._present()
            return Room(
                free=rounds * self.total - self._held - (rounds > 1) * self._waiting.count,
                subscription_default=rounds * self.per_receiver,
                owner_default=rounds * self._share(None, present + 1),
                subscriptions={sid: rounds * self.per_receiver - n for sid, n in held.items()},
                owners={owner: max(0, rounds * self._share(owner, present) - n)
                        for owner, n in owners.items()},
                releases=self._releases)

    def wait_for_release(self, since, timeout, count=1):
        """Wait until ``count`` slots were released after ``since`` (a
        ``Room``'s ``releases``): at once if they were already; False on
        timeout. For one waiting thread at a time (the worker's claiming loop)."""
        with self._changed:
            self._wake_at = since + count  # one waiter: releases before it wake nobody
            try:
                return self._changed.wait_for(lambda: self._releases >= self._wake_at,
                                              timeout)
            finally:
                self._wake_at = 0

    def wait_until_idle(self, timeout):
        """Wait until no slot is held; False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._held, timeout)

    def reset(self):
        """Forget every slot (a forked child holds none of its parent's)."""
        with self._changed:
            self._subscriptions.clear()
            self._owners.clear()
            self._held = 0
            self._waiting.take_all()
