"""The cross-run cache's storage: one interface, an in-process implementation.

A cache entry lives under a call site (`kind:name`, as the journal names calls) and a key
(the journal's content key without run and occurrence). Values are kept as the bytes the
journal would store for the output (JSON of the serializer's tree, encrypted and redacted as
journal outputs are), so loading one never imports or calls anything. Each backend keeps its
entries next to its runs (`stores/sqlite/_cache.py`, `stores/redis/_cache.py`,
`stores/postgres/_cache.py`); `Store.cache` opens the one of its namespace.
"""

from __future__ import annotations

import abc
import dataclasses
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from ._once import Once

__all__ = [
    "CacheBackend",
    "CacheEntry",
    "CacheStats",
    "MemoryCache",
    "TableCache",
]

T = TypeVar("T")


class Store(Protocol):
    """What a cache uses of its `Store` (which imports this module): its worker threads."""

    async def _in_thread(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T: ...


@dataclasses.dataclass(frozen=True, slots=True)
class CacheEntry:
    """One cached value, as a lookup returns it."""

    value: bytes
    """The stored tree, JSON-encoded (decode with the serializer's `from_tree`)."""
    duration: float = 0.0
    """Seconds the call took when it ran (what a hit saves)."""
    tokens: int = 0
    """Tokens the call used when it ran (what a hit saves)."""


@dataclasses.dataclass(slots=True)
class CacheStats:
    """What the cache holds and did for one call site (`agentrewind cache stats`)."""

    site: str
    entries: int = 0
    bytes: int = 0
    hits: int = 0
    misses: int = 0
    seconds_saved: float = 0.0
    tokens_saved: int = 0

    @property
    def hit_rate(self) -> float:
        """Hits over lookups (0.0 before the first lookup)."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def as_dict(self) -> dict[str, Any]:
        """The statistics as a plain dict, with the hit rate."""
        return dataclasses.asdict(self) | {"hit_rate": self.hit_rate}


class CacheBackend(abc.ABC):
    """The cache of one store namespace. Sync methods per backend; async twins in threads.

    Every lookup counts a hit or a miss for its site; a hit also counts the seconds and
    tokens its entry saved and makes the entry the most recently used (LRU eviction).
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    @abc.abstractmethod
    def get(self, site: str, key: str) -> CacheEntry | None:
        """The live entry of `key` at `site`, or None (counted as a miss)."""

    @abc.abstractmethod
    def put(
        self,
        site: str,
        key: str,
        entry: CacheEntry,
        *,
        ttl: float | None,
        max_entries: int | None = None,
    ) -> None:
        """Store `entry` for `ttl` seconds (None: until evicted or cleared).

        With `max_entries`, the least recently used entries of the site beyond it go.
        """

    @abc.abstractmethod
    def clear(self, site: str | None = None) -> int:
        """Drop the entries and statistics of `site` (None: every site); return entries gone."""

    @abc.abstractmethod
    def stats(self) -> list[CacheStats]:
        """Statistics per site that holds entries or has seen lookups, sorted by site."""

    async def aget(self, site: str, key: str) -> CacheEntry | None:
        """Async twin of `get`."""
        return await self.store._in_thread(self.get, site, key)

    async def aput(
        self,
        site: str,
        key: str,
        entry: CacheEntry,
        *,
        ttl: float | None,
        max_entries: int | None = None,
    ) -> None:
        """Async twin of `put`."""
        await self.store._in_thread(self.put, site, key, entry, ttl=ttl, max_entries=max_entries)

    async def aclear(self, site: str | None = None) -> int:
        """Async twin of `clear`."""
        return await self.store._in_thread(self.clear, site)

    async def astats(self) -> list[CacheStats]:
        """Async twin of `stats`."""
        return await self.store._in_thread(self.stats)


class TableCache(CacheBackend):
    """A cache whose tables are created (or migrated) once, on first use, by `_create_tables`."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self._tables = Once(self._create_tables)

    @abc.abstractmethod
    def _create_tables(self) -> None:
        """Create or migrate the cache's tables (run once, under a lock)."""


class MemoryCache(CacheBackend):
    """The cache of a `MemoryStore`: shared by stores of the same `memory://NAME`."""

    def __init__(self, store: Store, space: dict[str, Any], lock: threading.RLock) -> None:
        super().__init__(store)
        self._sites: dict[str, OrderedDict[str, tuple[CacheEntry, float | None]]] = (
            space.setdefault("entries", {})
        )
        self._stats: dict[str, CacheStats] = space.setdefault("stats", {})
        self._lock = lock

    def _count(self, site: str) -> CacheStats:
        return self._stats.setdefault(site, CacheStats(site))

    def get(self, site: str, key: str) -> CacheEntry | None:
        with self._lock:
            entries = self._sites.get(site)
            found = None if entries is None else entries.get(key)
            stats = self._count(site)
            if found is None or (found[1] is not None and found[1] < time.time()):
                if found is not None and entries is not None:
                    del entries[key]
                stats.misses += 1
                return None
            assert entries is not None
            entries.move_to_end(key)
            stats.hits += 1
            stats.seconds_saved += found[0].duration
            stats.tokens_saved += found[0].tokens
            return found[0]

    def put(
        self,
        site: str,
        key: str,
        entry: CacheEntry,
        *,
        ttl: float | None,
        max_entries: int | None = None,
    ) -> None:
        expires = None if ttl is None else time.time() + ttl
        with self._lock:
            entries = self._sites.setdefault(site, OrderedDict())
            entries[key] = (entry, expires)
            entries.move_to_end(key)
            while max_entries is not None and len(entries) > max_entries:
                entries.popitem(last=False)

    def clear(self, site: str | None = None) -> int:
        with self._lock:
            sites = list(self._sites) if site is None else [site]
            gone = sum(len(self._sites.pop(s, ())) for s in sites)
            for s in list(self._stats) if site is None else [site]:
                self._stats.pop(s, None)
            return gone

    def stats(self) -> list[CacheStats]:
        now = time.time()
        with self._lock:
            out: dict[str, CacheStats] = {}
            for site, entries in self._sites.items():
                live = [e for e, exp in entries.values() if exp is None or exp >= now]
                s = dataclasses.replace(self._count(site))
                s.entries, s.bytes = len(live), sum(len(e.value) for e in live)
                out[site] = s
            for site, counted in self._stats.items():
                out.setdefault(site, dataclasses.replace(counted))
            return [out[s] for s in sorted(out)]
