"""The file descriptors a process's webhook connections may keep.

Every kept-alive connection holds a descriptor, and a process out of
descriptors can open nothing: no connection, no database connection, no
file. So, at a process's first attempt (``start``):

- its soft ``RLIMIT_NOFILE`` is raised to the hard limit, as servers do
  (the systemd units set the hard limit with ``LimitNOFILE``);
- its connections keep at most ``kept_budget(limit)`` descriptors between
  attempts: half of the limit, less ``RESERVED_DESCRIPTORS`` for the
  process's own files (its database connections, logs, listening sockets);
  the other half is for the attempts under way. A connection given back to
  its pool while the process has more open is closed instead of kept;
- a kept connection idle for ``idle_seconds`` (the setting
  ``PLANTSTORE_WEBHOOK_IDLE_CONNECTION_SECONDS``) is closed: when taken for
  an attempt, and by a sweep every quarter of that time.

Running out anyway (``EMFILE``, ``ENFILE``) is the process's own trouble
(``http_post``): the delivery is given back unsent, never charged to its
receiver.
"""
import os
import resource
import threading
import time
import weakref

RESERVED_DESCRIPTORS = 64
"""Descriptors of a process's own (database connections, logs, sockets)
never counted on for kept connections."""

UNLIMITED = 1 << 20
"""The limit counted on when the process has none."""

_lock = threading.Lock()
_idle_changed = threading.Condition(_lock)
_pools = weakref.WeakSet()  # every connection pool of this process's senders
_state = {"pid": None, "limit": None, "budget": 0, "open": 0, "idle_seconds": 60.0}


def raise_soft_limit():
    """Raise this process's soft ``RLIMIT_NOFILE`` to its hard limit (when
    allowed); the soft limit it has then."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass  # an unlimited hard limit the kernel caps: keep the soft one
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return UNLIMITED if soft == resource.RLIM_INFINITY else soft


def kept_budget(limit):
    """Most connections a process with ``limit`` descriptors keeps open
    between attempts."""
    return max(0, (limit - RESERVED_DESCRIPTORS) // 2)


def start(idle_seconds):
    """Size this process's budget from its descriptor limit (once per
    process, raising its soft limit first), start its idle sweep, and close
    connections idle for ``idle_seconds`` from now on."""
    with _lock:
        if _state["idle_seconds"] != idle_seconds:
            _state["idle_seconds"] = idle_seconds
            _idle_changed.notify_all()
        if _state["pid"] == os.getpid():
            return
        limit = raise_soft_limit()
        _state.update(pid=os.getpid(), limit=limit, budget=kept_budget(limit), open=0)
        _pools.clear()
    threading.Thread(target=_sweep_forever, name="webhook-idle-close", daemon=True).start()


def limits():
    """(the descriptor limit, the kept connections' budget) of this process,
    once started."""
    with _lock:
        return _state["limit"], _state["budget"]


def register(pool):
    """Have the idle sweep look at ``pool``'s kept connections."""
    with _lock:
        _pools.add(pool)


def opened(connection):
    """``connection`` now holds a descriptor."""
    with _lock:
        _state["open"] += 1
    connection.counted = True


def closed(connection):
    """``connection`` no longer holds its descriptor (idempotent)."""
    with _lock:
        if getattr(connection, "counted", False):
            connection.counted = False
            _state["open"] -= 1


def over_budget():
    """Whether this process holds more connections than it may keep."""
    with _lock:
        return _state["open"] > _state["budget"]


def idle_too_long(connection, now=None):
    """Whether kept ``connection`` has been idle longer than it may be."""
    idle_since = getattr(connection, "idle_since", None)
    if idle_since is None:
        return False
    return (now or time.monotonic()) - idle_since > _state["idle_seconds"]


def sweep():
    """Close every kept connection idle for too long; how many were."""
    with _lock:
        pools = list(_pools)
    now, count = time.monotonic(), 0
    for pool in pools:
        kept = pool.pool
        if kept is None:  # the pool was closed
            continue
        with kept.mutex:  # no attempt takes a connection meanwhile
            for connection in kept.queue:
                if connection is not None and connection.sock is not None \
                        and idle_too_long(connection, now):
                    connection.close()
                    count += 1
    return count


def _sweep_forever():
    pid = os.getpid()
    while True:
        with _lock:
            if _state["pid"] != pid:
                return
            _idle_changed.wait(_state["idle_seconds"] / 4)  # sooner when it changes
        sweep()
