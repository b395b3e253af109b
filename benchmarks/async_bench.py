"""RewindSaver's async API under concurrency, beside the official async savers (one process).

A 3-node graph invoked with `ainvoke(..., durability="sync")` on distinct threads, with 16
and with 64 invocations in flight: invokes per second for RewindSaver on SQLite, Redis and
PostgreSQL beside AsyncSqliteSaver, plainredis's AsyncRedisSaver (and langgraph-checkpoint-
redis's AsyncRedisSaver when installed, which needs Redis Stack) and AsyncPostgresSaver on a
pool. Rounds are interleaved (every saver at every concurrency once per round, in a shuffled
order) and each figure is the median over rounds, printed with its ratio to its anchor and
its 64/16 ratio.

Usage: python benchmarks/async_bench.py [--quick] [--rounds N] [--invokes N]
    [--savers a,b] [--baseline DIR]
`--baseline DIR`: DIR holds an older copy of the adapter package renamed
`agentrewind_langgraph_base`; its savers run beside as `<name>@base` (before/after in one run).
PostgreSQL: $AGENTREWIND_TEST_POSTGRES names the server (default 127.0.0.1:5432); a scratch
database `$AGENTREWIND_BENCH_DB_PREFIX_<pid>` (default prefix `agentrewind_bench`) is created
and dropped. Redis: see `_bench_redis.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import operator
import os
import random
import secrets
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypedDict
from urllib.parse import urlsplit, urlunsplit

from _bench_redis import bench_redis_url
from langgraph.graph import END, START, StateGraph

from agentrewind_langgraph import RewindSaver

os.environ.setdefault("AGENTREWIND_REDIS_PERSISTENCE_WARNING", "0")  # its server is a scratch one
ROOT = tempfile.mkdtemp(prefix="lg-async-bench-")
SERVER = os.environ.get(
    "AGENTREWIND_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres"
)
INFLIGHT = (16, 64)
ANCHORS = {
    "Rewind/sqlite": "AsyncSqliteSaver",
    "Rewind/redis": "plainredis",
    "Rewind/pg": "AsyncPostgresSaver",
}


class State(TypedDict):
    messages: Annotated[list[str], operator.add]


def three_nodes() -> Any:
    b = StateGraph(State)
    prev = START
    for i in range(3):
        b.add_node(f"n{i}", lambda s, i=i: {"messages": [f"node {i}: a small message"]})
        b.add_edge(prev, f"n{i}")
        prev = f"n{i}"
    b.add_edge(prev, END)
    return b


Opened = tuple[Any, Callable[[], Awaitable[None]]]
"""A saver and the coroutine function that closes it."""


def makers(pg_url: str | None, base: Any) -> dict[str, Callable[[], Awaitable[Opened]]]:
    """Every saver to measure, by name: an async function opening it."""
    out: dict[str, Callable[[], Awaitable[Opened]]] = {}

    async def memory() -> Opened:
        from langgraph.checkpoint.memory import InMemorySaver

        return InMemorySaver(), _nothing

    async def aiosqlite_saver() -> Opened:
        import aiosqlite
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        conn = await aiosqlite.connect(f"{ROOT}/{uuid.uuid4().hex}.sqlite")
        return AsyncSqliteSaver(conn), conn.close

    async def plainredis() -> Opened:
        from langgraph_checkpoint_plainredis import AsyncRedisSaver
        from redis.asyncio import BlockingConnectionPool, Redis

        # Its default client's pool refuses a 101st connection, which 64 in flight reach.
        pool = BlockingConnectionPool.from_url(bench_redis_url(), max_connections=64)
        prefix = "abench" + uuid.uuid4().hex[:8]
        saver = AsyncRedisSaver(Redis(connection_pool=pool), prefix=prefix)
        return saver, lambda: _sweep(prefix, saver.aclose)

    async def pg_anchor() -> Opened:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg.rows import dict_row
        from psycopg_pool import AsyncConnectionPool

        assert pg_url is not None
        pool: Any = AsyncConnectionPool(
            pg_url,
            max_size=8,
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
            open=False,
        )
        await pool.open()
        saver = AsyncPostgresSaver(pool)
        await saver.setup()
        return saver, pool.close

    def rewind(cls: Any, url: Callable[[], str]) -> Callable[[], Awaitable[Opened]]:
        async def make() -> Opened:
            saver = cls(url())
            await saver.asetup()

            async def close() -> None:
                if saver.store.scheme == "redis":
                    client = saver.store.client
                    await asyncio.to_thread(_delete_keys, client, f"ar:{saver.store.namespace}:")
                await saver.aclose()

            return saver, close

        return make

    def sqlite_url() -> str:
        return f"sqlite:///{ROOT}/{uuid.uuid4().hex}.db"

    def redis_url() -> str:
        return f"{bench_redis_url()}?namespace=ab-{uuid.uuid4().hex[:8]}"

    def pg_rewind_url() -> str:
        return f"{pg_url}?namespace=ab{uuid.uuid4().hex[:8]}"

    out["memory"] = memory
    out["AsyncSqliteSaver"] = aiosqlite_saver
    out["plainredis"] = plainredis
    try:
        from langgraph.checkpoint.redis.aio import AsyncRedisSaver as Official  # noqa: F401

        out["langgraph-checkpoint-redis"] = _official_redis
    except ImportError:
        pass
    if pg_url is not None:
        out["AsyncPostgresSaver"] = pg_anchor
    for suffix, cls in (("", RewindSaver), ("@base", base)):
        if cls is None:
            continue
        out[f"Rewind/sqlite{suffix}"] = rewind(cls, sqlite_url)
        out[f"Rewind/redis{suffix}"] = rewind(cls, redis_url)
        if pg_url is not None:
            out[f"Rewind/pg{suffix}"] = rewind(cls, pg_rewind_url)
    return out


async def _official_redis() -> Opened:  # pragma: no cover - needs Redis Stack modules
    from langgraph.checkpoint.redis.aio import AsyncRedisSaver

    cm = AsyncRedisSaver.from_conn_string(bench_redis_url())
    saver = await cm.__aenter__()
    await saver.asetup()
    return saver, lambda: cm.__aexit__(None, None, None)


async def _nothing() -> None:
    return None


def _delete_keys(client: Any, prefix: str) -> None:
    keys = list(client.scan_iter(match=prefix + "*", count=1000))
    for i in range(0, len(keys), 500):
        client.delete(*keys[i : i + 500])


async def _sweep(prefix: str, close: Callable[[], Awaitable[None]]) -> None:
    await close()
    import redis

    client = redis.Redis.from_url(bench_redis_url())
    await asyncio.to_thread(_delete_keys, client, prefix)
    client.close()


async def measure(make: Callable[[], Awaitable[Opened]], inflight: int, n: int) -> float:
    """Invokes per second of `n` invocations, `inflight` at a time, on a fresh saver."""
    saver, close = await make()
    graph = three_nodes().compile(checkpointer=saver)
    sem = asyncio.Semaphore(inflight)

    async def one() -> None:
        async with sem:
            cfg = {"configurable": {"thread_id": uuid.uuid4().hex}}
            await graph.ainvoke({"messages": []}, cfg, durability="sync")

    try:
        await asyncio.gather(*(one() for _ in range(inflight)))  # warm up: open connections
        t = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        return n / (time.perf_counter() - t)
    finally:
        await close()


def report(rates: dict[tuple[str, int], list[float]], names: list[str]) -> None:
    med = {k: statistics.median(v) for k, v in rates.items() if v}
    rounds = max((len(v) for v in rates.values()), default=0)
    print(f"\n3-node graph, ainvoke durability=sync: invokes/s, median of {rounds} rounds")
    print(f"  {'saver':<28}" + "".join(f"{f'{i} in flight':>14}" for i in INFLIGHT) + "   64/16")
    for name in names:
        cells = [med.get((name, i)) for i in INFLIGHT]
        if any(c is None for c in cells):
            continue
        line = f"  {name:<28}" + "".join(f"{c:>14.0f}" for c in cells if c is not None)
        print(line + f"   x{(cells[1] or 0) / (cells[0] or 1):.2f}")
    print("  ratios to the anchor (same run, same concurrency):")
    for name in names:
        anchor = ANCHORS.get(name.split("@")[0])
        if anchor is None or (name, 16) not in med or (anchor, 16) not in med:
            continue
        parts = [f"{i}: x{med[(name, i)] / med[(anchor, i)]:.2f}" for i in INFLIGHT]
        print(f"    {name:<26} vs {anchor:<20} " + "   ".join(parts))
    for name in names:
        if name.endswith("@base"):
            now = name.removesuffix("@base")
            if (now, 16) in med and (name, 16) in med:
                parts = [f"{i}: x{med[(now, i)] / med[(name, i)]:.2f}" for i in INFLIGHT]
                print(f"    {now:<26} after / before       " + "   ".join(parts))


async def run(rounds: int, n: int, pg_url: str | None, base: Any, only: set[str] | None) -> None:
    table = makers(pg_url, base)
    if only:
        table = {k: v for k, v in table.items() if k in only or k.split("@")[0] in only}
    names = list(table)
    rates: dict[tuple[str, int], list[float]] = {(k, i): [] for k in names for i in INFLIGHT}
    for r in range(rounds):
        plan = [(k, i) for k in names for i in INFLIGHT]
        random.shuffle(plan)
        for name, inflight in plan:
            rates[(name, inflight)].append(await measure(table[name], inflight, n))
        print(f"  round {r + 1}/{rounds} done (load {os.getloadavg()[0]:.1f})", flush=True)
    report(rates, names)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true", help="3 rounds of 150 invokes")
    p.add_argument("--rounds", type=int)
    p.add_argument("--invokes", type=int, help="invocations per measurement")
    p.add_argument("--savers", help="comma-separated names to run (their anchors are kept)")
    p.add_argument("--no-postgres", action="store_true")
    p.add_argument("--baseline", metavar="DIR", help="older adapter copy: see the docstring")
    a = p.parse_args()
    rounds = a.rounds or (3 if a.quick else 5)
    n = a.invokes or (150 if a.quick else 300)
    base = None
    if a.baseline:
        sys.path.insert(0, a.baseline)
        from agentrewind_langgraph_base import RewindSaver as base  # type: ignore[no-redef]
    only = None
    if a.savers:
        only = set(a.savers.split(","))
        only |= {ANCHORS[s] for s in list(only) if s in ANCHORS}
    pg_url, db = None, None
    if not a.no_postgres:
        import psycopg

        prefix = os.environ.get("AGENTREWIND_BENCH_DB_PREFIX", "agentrewind_bench")
        db = f"{prefix}_{os.getpid()}_{secrets.token_hex(3)}"
        try:
            with psycopg.connect(SERVER, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{db}"')
            pg_url = urlunsplit(urlsplit(SERVER)._replace(path=f"/{db}"))
        except psycopg.Error as exc:
            print(f"  (no PostgreSQL: {exc}; its savers are skipped)")
            db = None
    print(f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {n} invokes per figure")
    t0 = time.perf_counter()
    try:
        asyncio.run(run(rounds, n, pg_url, base, only))
    finally:
        if db is not None:
            import psycopg

            with psycopg.connect(SERVER, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
