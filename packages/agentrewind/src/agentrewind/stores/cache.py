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
import atexit
import contextlib
import dataclasses
import threading
import time
import weakref
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
    "TalliedCache",
    "Tally",
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


Counts = dict[str, list[Any]]
"""Per site: `[hits, misses, seconds_saved, tokens_saved]` not yet written."""


class Tally:
    """A cache's hit and miss counts, written in batches rather than one write per lookup.

    A hit then costs a read, like the anchors' caches, instead of a write transaction. The
    counts are written by the lookup that makes `EVERY` of them pending, or that finds the
    oldest pending one `SECONDS` old, and before `stats`, `clear` and `close` (and at exit),
    so `stats` in this process is exact and another process's `agentrewind cache stats` is
    at most that far behind a live process (a process killed outright loses its pending
    counts, never an entry).
    """

    EVERY = 256
    SECONDS = 1.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counts = {}
        self._pending = 0
        self._since = 0.0

    def add(self, site: str, hit: bool, duration: float = 0.0, tokens: int = 0) -> bool:
        """Count a lookup; True when the pending counts are due to be written (`take`)."""
        with self._lock:
            c = self._counts.get(site)
            if c is None:
                c = self._counts[site] = [0, 0, 0.0, 0]
            if hit:
                c[0] += 1
                c[2] += duration
                c[3] += tokens
            else:
                c[1] += 1
            self._pending += 1
            now = time.monotonic()
            if self._pending == 1:
                self._since = now
            return self._pending >= self.EVERY or now - self._since >= self.SECONDS

    def take(self) -> Counts:
        """The pending counts, now no longer pending."""
        with self._lock:
            counts, self._counts, self._pending = self._counts, {}, 0
        return counts

    def give_back(self, counts: Counts) -> None:
        """Pend again counts whose write failed (the next flush retries them)."""
        with self._lock:
            for site, (hits, misses, seconds, tokens) in counts.items():
                c = self._counts.setdefault(site, [0, 0, 0.0, 0])
                c[0], c[1], c[2], c[3] = c[0] + hits, c[1] + misses, c[2] + seconds, c[3] + tokens
                self._pending += hits + misses


_LIVE: weakref.WeakSet[TalliedCache] = weakref.WeakSet()


@atexit.register
def _flush_at_exit() -> None:
    for cache in list(_LIVE):
        with contextlib.suppress(Exception):
            cache.flush()


class TalliedCache(CacheBackend):
    """A cache whose lookups count through a `Tally` (SQLite, PostgreSQL, Redis).

    A backend calls `_counted(site, hit, ...)` after each lookup and implements
    `_write_counts`; its `stats` and `clear` call `flush` first, its store's `close` too.
    """

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self._tally = Tally()
        _LIVE.add(self)

    @abc.abstractmethod
    def _write_counts(self, counts: Counts) -> None:
        """Add `counts` to the sites' counters, in one transaction."""

    def _counted(self, site: str, hit: bool, duration: float = 0.0, tokens: int = 0) -> None:
        if self._tally.add(site, hit, duration, tokens):
            self.flush()

    def flush(self) -> None:
        """Write the pending hit and miss counts now (`stats` and `clear` do it first)."""
        counts = self._tally.take()
        if not counts:
            return
        try:
            self._write_counts(counts)
        except BaseException:
            self._tally.give_back(counts)
            raise


class TableCache(TalliedCache):
    """A cache in tables, created (or migrated) once, on first use, by `_create_tables`."""

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
