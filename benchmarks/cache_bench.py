"""The cross-run cache: µs per hit and per miss+store, per store, beside the frameworks' caches.

Run: `python benchmarks/cache_bench.py [--calls N] [--large N]` (in an environment with the
`bench` group: LangGraph's caches come from `langgraph` / `langgraph-checkpoint-sqlite`).

Timed call by call, median, in one process (the lowest of 3 rounds' medians, for every
measurement alike; a miss+store round stores new keys each time):

* agentrewind `Store.cache` (what `cache_ttl=` steps, `RewindCache` of both adapters use):
  a hit (`get` of a present entry: one transaction or script that also counts the hit and
  refreshes the entry's LRU time) and a miss+store (`get` of an absent key, then `put`), on
  memory, SQLite, Redis (a server of our own, `_bench_redis`) and PostgreSQL
  ($AGENTREWIND_TEST_POSTGRES, default postgresql://postgres@127.0.0.1:5432/postgres; skipped
  with a note when unreachable).
* the anchors, same run, same payload: LangGraph's `InMemoryCache`, `SqliteCache` and
  `RedisCache` (`get` / `set` of one key), langchain-core's `InMemoryCache` and
  langchain-community's `SQLiteCache` and `RedisCache` (`lookup` / `update`: what
  `set_llm_cache` calls), each on the store it competes with (the same Redis server).
* flatness: the hit on SQLite and Redis with 1,000 and with `--large` (default 100,000)
  entries in the site, keys read in a scattered order; LangGraph's `SqliteCache` beside it.
* hit counts are written in batches (`stores.cache.Tally`): a hit on a site without
  `max_entries` is a read; the batch writes are inside the timed calls that make them.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _bench_redis import bench_redis_url

import agentrewind
from agentrewind.adapters import CacheEntry

PG_URL = os.environ.get(
    "AGENTREWIND_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres"
)
GOAL_HIT_SQLITE_US = 50.0
PAYLOAD = {"answer": "x" * 200, "sources": [f"https://example.com/{i}" for i in range(5)]}
VALUE = json.dumps(PAYLOAD).encode()


ROUNDS = 3
FRESH = itertools.count()  # keys never asked before: every miss+store call misses


def _median_us(fn: Callable[[int], Any], n: int) -> float:
    """The lowest of `ROUNDS` medians of `n` calls (a shared machine's bursts hit one round,
    ours or an anchor's alike)."""
    medians = []
    for _ in range(ROUNDS):
        samples = []
        for i in range(n):
            t0 = time.perf_counter()
            fn(i)
            samples.append(time.perf_counter() - t0)
        medians.append(statistics.median(samples))
    return min(medians) * 1e6


def _ours(store: agentrewind.Store, n: int) -> tuple[float, float]:
    cache, site = store.cache, f"custom:bench-{uuid.uuid4().hex[:6]}"
    entry = CacheEntry(VALUE, 0.5, 10)
    cache.put(site, "hot", entry, ttl=3600)
    hit = _median_us(lambda i: cache.get(site, "hot"), n)

    def miss_store(i: int) -> None:
        key = f"m{next(FRESH)}"
        if cache.get(site, key) is None:
            cache.put(site, key, entry, ttl=3600)

    miss = _median_us(miss_store, n)
    cache.clear(site)
    return hit, miss


def _flat(store: agentrewind.Store, sizes: list[int], n: int) -> list[float]:
    cache, site = store.cache, f"custom:flat-{uuid.uuid4().hex[:6]}"
    entry = CacheEntry(VALUE, 0.5, 10)
    out, filled = [], 0
    for size in sizes:
        while filled < size:
            cache.put(site, f"k{filled}", entry, ttl=3600)
            filled += 1
        out.append(_median_us(lambda i, s=size: cache.get(site, f"k{(i * 7919) % s}"), n))
    cache.clear(site)
    return out


def _langgraph_anchor(make: Callable[[], Any], n: int) -> tuple[float, float]:
    cache = make()
    ns = ("bench", uuid.uuid4().hex[:6])
    cache.set({(ns, "hot"): (PAYLOAD, 3600)})
    hit = _median_us(lambda i: cache.get([(ns, "hot")]), n)

    def miss_store(i: int) -> None:
        key = f"m{next(FRESH)}"
        if not cache.get([(ns, key)]):
            cache.set({(ns, key): (PAYLOAD, 3600)})

    miss = _median_us(miss_store, n)
    cache.clear([ns])
    return hit, miss


def _langgraph_flat(cache: Any, sizes: list[int], n: int) -> list[float]:
    """`_flat` for a LangGraph cache (filled in one `set` per size: its `set` is one
    transaction per call)."""
    ns, out, filled = ("flat", uuid.uuid4().hex[:6]), [], 0
    for size in sizes:
        cache.set({(ns, f"k{i}"): (PAYLOAD, 3600) for i in range(filled, size)})
        filled = size
        out.append(_median_us(lambda i, s=size: cache.get([(ns, f"k{(i * 7919) % s}")]), n))
    cache.clear([ns])
    return out


def _langchain_anchor(n: int, cache: Any = None) -> tuple[float, float]:
    """langchain-core's `InMemoryCache`, or `cache` (a LangChain `BaseCache`)."""
    from langchain_core.caches import InMemoryCache
    from langchain_core.outputs import Generation

    cache, gens = cache or InMemoryCache(), [Generation(text=json.dumps(PAYLOAD))]
    cache.update("hot", "llm", gens)
    hit = _median_us(lambda i: cache.lookup("hot", "llm"), n)

    def miss_store(i: int) -> None:
        prompt = f"m{next(FRESH)}"
        if cache.lookup(prompt, "llm") is None:
            cache.update(prompt, "llm", gens)

    return hit, _median_us(miss_store, n)


def _row(label: str, hit: float, miss: float, anchor: str = "") -> None:
    print(f"  {label:<40} hit {hit:8.1f} µs   miss+store {miss:8.1f} µs  {anchor}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--large", type=int, default=100_000)
    args = ap.parse_args()
    n = args.calls
    tmp = Path(tempfile.mkdtemp())
    ours: dict[str, tuple[float, float]] = {}
    stores: dict[str, agentrewind.Store] = {
        "memory": agentrewind.connect("memory://"),
        "sqlite": agentrewind.connect(f"sqlite:///{tmp / 'cache.db'}"),
        "redis": agentrewind.connect(f"{bench_redis_url()}?namespace=bench-cache"),
    }
    try:
        stores["postgres"] = agentrewind.connect(f"{PG_URL}?namespace=bench-cache")
    except agentrewind.StoreError as exc:
        print(f"PostgreSQL skipped: {exc}")
    print(f"cache: median µs per call over {n} calls, payload {len(VALUE)} bytes")
    print("agentrewind Store.cache")
    for name, store in stores.items():
        ours[name] = _ours(store, n)
        _row(name, *ours[name])
    print("anchors (same run)")
    anchors: dict[str, list[tuple[str, tuple[float, float]]]] = {
        "memory": [],
        "sqlite": [],
        "redis": [],
    }
    try:
        from langgraph.cache.memory import InMemoryCache as LGMemory

        anchors["memory"].append(("LangGraph InMemoryCache", _langgraph_anchor(LGMemory, n)))
        _row("LangGraph InMemoryCache", *anchors["memory"][-1][1])
    except ImportError as exc:
        print(f"  LangGraph InMemoryCache not installed: {exc}")
    try:
        from langgraph.cache.sqlite import SqliteCache

        path = str(tmp / "lg.db")
        lg_sqlite = _langgraph_anchor(lambda: SqliteCache(path=path), n)
        anchors["sqlite"].append(("LangGraph SqliteCache", lg_sqlite))
        _row("LangGraph SqliteCache", *lg_sqlite)
    except ImportError as exc:
        print(f"  LangGraph SqliteCache not installed: {exc}")
    import redis

    try:
        from langgraph.cache.redis import RedisCache as LGRedis

        client = redis.Redis.from_url(bench_redis_url())
        lg_redis = _langgraph_anchor(lambda: LGRedis(client), n)
        anchors["redis"].append(("LangGraph RedisCache", lg_redis))
        _row("LangGraph RedisCache", *lg_redis)
    except ImportError as exc:
        print(f"  LangGraph RedisCache not installed: {exc}")
    try:
        anchors["memory"].append(("langchain-core InMemoryCache", _langchain_anchor(n)))
        _row("langchain-core InMemoryCache", *anchors["memory"][-1][1])
    except ImportError as exc:
        print(f"  langchain-core not installed: {exc}")
    try:
        from langchain_community.cache import RedisCache as LCRedis
        from langchain_community.cache import SQLiteCache as LCSqlite

        lc_sqlite = LCSqlite(database_path=str(tmp / "lc.db"))
        anchors["sqlite"].append(("LangChain SQLiteCache", _langchain_anchor(n, lc_sqlite)))
        _row("LangChain SQLiteCache", *anchors["sqlite"][-1][1])
        lc_redis = LCRedis(redis.Redis.from_url(bench_redis_url()), ttl=3600)
        anchors["redis"].append(("LangChain RedisCache", _langchain_anchor(n, lc_redis)))
        _row("LangChain RedisCache", *anchors["redis"][-1][1])
        lc_redis.clear()
    except ImportError as exc:
        print(f"  langchain-community not installed: {exc}")
    goal = "met" if ours["sqlite"][0] <= GOAL_HIT_SQLITE_US else "MISSED"
    print(f"goal: SQLite hit <= {GOAL_HIT_SQLITE_US:.0f} µs: {ours['sqlite'][0]:.1f} µs ({goal})")
    print("goal: hit <= every anchor of the same store")
    for name, measured in anchors.items():
        for label, (hit, _) in measured:
            mine = ours[name][0]
            verdict = "met" if mine <= hit else "MISSED"
            print(f"  {name:<8} {mine:8.1f} µs vs {label:<30} {hit:8.1f} µs  ({verdict})")
    if args.large:
        sizes = [1000, args.large]
        print(f"flatness: hit µs with {sizes[0]:,} and {sizes[1]:,} entries in the site")
        for name in ("sqlite", "redis"):
            a, b = _flat(stores[name], sizes, n)
            print(f"  {name:<30} {a:8.1f} -> {b:8.1f} µs  ({b / a:.2f}x)")
        try:
            from langgraph.cache.sqlite import SqliteCache

            lg = SqliteCache(path=str(tmp / "lg-flat.db"))
            a, b = _langgraph_flat(lg, sizes, n)
            print(
                f"  {'anchor: LangGraph SqliteCache':<30} {a:8.1f} -> {b:8.1f} µs  ({b / a:.2f}x)"
            )
        except ImportError as exc:
            print(f"  LangGraph SqliteCache not installed: {exc}")
    for store in stores.values():
        store.close()


if __name__ == "__main__":
    sys.exit(main())
