"""Pools that cannot connect: operations open their own connection meanwhile.

A `psycopg_pool` pool whose connections all failed (the server restarted or went away)
reconnects with a backoff that doubles (1 s, 2 s, 4 s, ... up to minutes): after the server is
back, it could still time out operation after operation. A timeout while the pool could still
grow means it cannot connect; from then on, until it has an idle connection again, each
operation opens a connection of its own (failing fast while the server is still down), and
first calls the pool's `check()`: a pool that gave up reconnecting (after its
`reconnect_timeout`, 5 minutes) grows again only when asked, so it is asked. Only for the
pools a store opened itself, never a caller's.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator
from typing import Any

__all__ = ["StarvedPools"]


class StarvedPools:
    """The pools of one store (sync, and one per event loop) marked as unable to connect."""

    def __init__(self) -> None:
        self._pools: weakref.WeakSet[Any] = weakref.WeakSet()
        self._held: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def holding(self, pool: Any) -> Iterator[None]:
        """Count a connection of `pool` checked out by an operation while it is held."""
        with self._lock:
            self._held[pool] = self._held.get(pool, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                self._held[pool] -= 1

    def starve(self, pool: Any) -> bool:
        """After a timeout of a pool of ours: whether it failed to grow (then it is marked).

        Busy means every connection it may hold is checked out by an operation. Its size is
        no guide: connections lost in an outage still count in it while the pool waits out
        its reconnect backoff, so a pool that had all its connections open would look busy.
        """
        stats = pool.get_stats()
        if stats.get("pool_available", 0) or self._held.get(pool, 0) >= pool.max_size:
            return False
        self._pools.add(pool)
        return True

    def starved(self, pool: Any) -> bool:
        """Whether `pool` is marked by `starve` and has no idle connection yet."""
        if pool in self._pools:
            if not pool.get_stats().get("pool_available", 0):
                return True
            self._pools.discard(pool)
        return False
