"""The connections every attempt is sent over, and their pools.

A connection is made before anything else (urllib3 would make a plain HTTP
one inside ``request``, after the checks), then put under its attempt's
deadline (``deadline.guard``), then checked (``deadline.before_writing``:
the lease, and the subscription as it is now), and only then is its
request written. Its answer is read past interim 1xx answers within the
bounds of ``interim``. Each connection counts in the process's descriptor
budget (``descriptors``): one given back to its pool while the process has
more than it may keep is closed, and one kept idle too long is closed
before it is used again (the sweep closes the rest).

``GuardedAdapter`` is the requests transport adapter whose pools hold
these connections.
"""
import time

from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from . import descriptors
from .deadline import before_writing, guard
from .interim import InterimSkippingResponse


class _Guarded:
    """What both connection classes add to urllib3's."""
    response_class = InterimSkippingResponse

    def connect(self):
        super().connect()
        descriptors.opened(self)
        guard(self.sock)

    def request(self, *args, **kwargs):
        if self.sock is None:
            self.connect()  # connected first: the checks bind what is written
        guard(self.sock)  # a kept-alive connection: connect() is not called again
        before_writing()
        return super().request(*args, **kwargs)

    def close(self):
        descriptors.closed(self)
        super().close()


class _GuardedConnection(_Guarded, HTTPConnection):
    pass


class _GuardedTLSConnection(_Guarded, HTTPSConnection):
    pass


class _Kept:
    """What both pool classes add to urllib3's: the descriptor budget and
    the idle close."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        descriptors.register(self)

    def _get_conn(self, timeout=None):
        connection = super()._get_conn(timeout)
        if connection is not None and descriptors.idle_too_long(connection):
            connection.close()  # connected again when used
        return connection

    def _put_conn(self, conn):
        if conn is not None:
            if descriptors.over_budget():
                conn.close()
            conn.idle_since = time.monotonic()
        super()._put_conn(conn)


class _GuardedPool(_Kept, HTTPConnectionPool):
    ConnectionCls = _GuardedConnection


class _GuardedTLSPool(_Kept, HTTPSConnectionPool):
    ConnectionCls = _GuardedTLSConnection


class GuardedAdapter(HTTPAdapter):
    """requests' adapter (keep-alive pools) whose connections are guarded."""

    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _GuardedPool,
                                                   "https": _GuardedTLSPool}
