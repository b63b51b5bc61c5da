"""Keep-alive connections to receivers, pooled per subscription.

No two subscriptions share a connection, so whatever one receiver leaves on
a connection (an answer sent late or unasked) can only ever be read by an
attempt of the same subscription, never by another tenant's. Within a
subscription the pool is per origin (urllib3's, keyed by scheme, host and
port; an API subscription's by the address it was checked and pinned to).
A connection is reused only after a clean exchange: urllib3 drops one that
has bytes waiting before it is reused, an answer not read to its end
closes its connection (``http_post``), and an error closes it.

Each process keeps the adapters of its ``MOST_SUBSCRIPTIONS`` most recently
used subscriptions; the least recently used one beyond is closed. How many
connections they keep open altogether, and for how long idle, follows the
process's descriptor limit (``descriptors``).
"""
import collections
import os
import threading

from ..receivers import ssrf
from . import descriptors
from .guarded import GuardedAdapter
from .pinned_address import PinnedAddressAdapter

CONNECTIONS_PER_ORIGIN = 64
"""Keep-alive connections kept per subscription and origin (more may be
open, briefly)."""

ORIGINS_PER_SUBSCRIPTION = 4
"""Origins whose connections a subscription's adapter keeps (a URL changed
leaves the old origin's pool to be dropped)."""

MOST_SUBSCRIPTIONS = 1024
"""Subscriptions whose connections a process keeps."""

_lock = threading.Lock()
_adapters = collections.OrderedDict()  # (subscription id, policy) -> adapter, oldest first
_pid = None


def adapter_for(job, settings):
    """The transport adapter of ``job``'s subscription in this process (a
    forked child builds its own, so no two processes share a connection):
    checking and pinning the address for an API subscription, plain for an
    operator's."""
    global _pid
    descriptors.start(settings.idle_connection_seconds)
    policy = (settings.allowed_networks, settings.connect_timeout) if job.restricted else None
    key = (job.subscription_id, policy)
    closed = None
    with _lock:
        if _pid != os.getpid():
            _adapters.clear()
            _pid = os.getpid()
        current = _adapters.get(key)
        if current is not None:
            _adapters.move_to_end(key)
            return current
        current = _adapters[key] = _new_adapter(policy)
        if len(_adapters) > MOST_SUBSCRIPTIONS:
            closed = _adapters.popitem(last=False)[1]
    if closed is not None:
        closed.close()  # idle connections now; one in use is closed when released
    return current


def _new_adapter(policy):
    pools = {"pool_connections": ORIGINS_PER_SUBSCRIPTION,
             "pool_maxsize": CONNECTIONS_PER_ORIGIN}
    if policy is None:
        return GuardedAdapter(**pools)
    allowed, lookup_seconds = policy
    return PinnedAddressAdapter(ssrf.Policy(allowed, lookup_seconds), **pools)
