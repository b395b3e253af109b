"""RewindSaver beside InMemorySaver, SqliteSaver, AsyncSqliteSaver and plainredis (one process).

Workloads follow research/langgraph-anchors.md section 4:
  a  10-node line graph, distinct threads, durability sync/exit: median invoke, x memory
     (the savers take turns, one invoke each per round, in a shuffled order)
  b  raw ops on one thread of 1,000 checkpoints: put, put_writes, get_tuple, list, filter
  c  1,000-message state where only a small counter changed: put latency, bytes/checkpoint
  d  async API: 200 threads via ainvoke, 1 vs 16 in flight (invokes/s)
  e  one thread, 200 turns appending 2 x 120-char messages (operator.add): stored bytes
  f  another connection holds the SQLite write lock for 6 s while a graph runs
  g  list(None, limit=10): the newest checkpoints across 10,000 threads (SQLite savers)

Usage: python benchmarks/langgraph_bench.py [--quick] [--parts abcdefg] [--savers a,b]
    [--baseline DIR]
Every figure is printed with its ratio to InMemorySaver (and to SqliteSaver/WAL: SqliteSaver
with WAL and synchronous=NORMAL, RewindSaver's own durability).
"""

from __future__ import annotations

import argparse
import asyncio
import operator
import os
import random
import sqlite3
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, TypedDict

from _bench_redis import bench_redis_url
from langchain_core.messages import AIMessage
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from agentrewind_langgraph import RewindSaver

ROOT = tempfile.mkdtemp(prefix="lg-bench-")


def _rewind_sqlite(**kw: Any) -> Any:
    return RewindSaver(f"sqlite:///{ROOT}/{uuid.uuid4().hex}.db", **kw)


def _rewind_redis(**kw: Any) -> Any:
    return RewindSaver(f"{bench_redis_url()}?namespace=bench-{uuid.uuid4().hex[:8]}", **kw)


def _plainredis() -> Any:
    from langgraph_checkpoint_plainredis import RedisSaver

    return RedisSaver(url=bench_redis_url(), prefix="bench" + uuid.uuid4().hex[:8])


def _sqlite_wal() -> Any:
    """SqliteSaver at RewindSaver's durability (WAL, synchronous=NORMAL): the fair anchor."""
    conn = sqlite3.connect(f"{ROOT}/{uuid.uuid4().hex}.sqlite", check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return SqliteSaver(conn)


SAVERS: dict[str, Callable[[], Any]] = {
    "memory": InMemorySaver,
    "SqliteSaver": lambda: SqliteSaver(
        sqlite3.connect(f"{ROOT}/{uuid.uuid4().hex}.sqlite", check_same_thread=False)
    ),
    "SqliteSaver/WAL": _sqlite_wal,
    "plainredis": _plainredis,
    "Rewind/sqlite": _rewind_sqlite,
    "Rewind/redis": _rewind_redis,
}


def close(saver: Any) -> None:
    if isinstance(saver, RewindSaver):
        if saver.store.scheme == "redis":
            _delete_prefix(saver.store.client, f"ar:{saver.store.namespace}:")
        saver.close()
    elif isinstance(saver, SqliteSaver):
        saver.conn.close()
    elif hasattr(saver, "prefix") and hasattr(saver, "client"):
        _delete_prefix(saver.client, f"{saver.prefix}:")


def _delete_prefix(client: Any, prefix: str) -> None:
    keys = list(client.scan_iter(match=prefix + "*", count=1000))
    for i in range(0, len(keys), 500):
        client.delete(*keys[i : i + 500])


def stored_bytes(saver: Any) -> int | None:
    if isinstance(saver, RewindSaver) and saver.store.scheme == "sqlite":
        with saver.backend.write() as conn:
            pass
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return os.path.getsize(saver.store.db.path)
    if isinstance(saver, SqliteSaver):
        saver.conn.commit()
        saver.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return os.path.getsize(saver.conn.execute("PRAGMA database_list").fetchone()[2])
    client, prefix = None, None
    if isinstance(saver, RewindSaver):
        client, prefix = saver.store.client, f"ar:{saver.store.namespace}:"
    elif hasattr(saver, "prefix"):
        client, prefix = saver.client, f"{saver.prefix}:"
    if client is not None:
        keys = list(client.scan_iter(match=prefix + "*", count=1000))
        return sum(client.memory_usage(k, samples=0) or 0 for k in keys)
    if isinstance(saver, InMemorySaver):
        n = sum(len(cp[1]) + len(md[1]) for th in saver.storage.values() for ns in th.values()
                for cp, md, _ in ns.values())  # fmt: skip
        n += sum(len(v[2][1]) for w in saver.writes.values() for v in w.values())
        return n + sum(len(b) for _, b in saver.blobs.values())
    return None


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def table(
    title: str, unit: str, rows: dict[str, float | None], lower_is_better: bool = True
) -> None:
    base = rows.get("memory")
    print(f"\n{title}")
    for name, v in rows.items():
        if v is None:
            print(f"  {name:<24} {'n/a':>12}")
            continue
        r = f"x{v / base:.2f} vs memory" if base else ""
        wal = rows.get("SqliteSaver/WAL")
        if wal and name != "SqliteSaver/WAL":
            r += f"   x{v / wal:.2f} vs SqliteSaver/WAL"
        print(f"  {name:<24} {v:>12.1f} {unit:<8} {r}")


class Line(TypedDict):
    messages: Annotated[list, operator.add]


def line_graph(n: int = 10) -> StateGraph:
    b = StateGraph(Line)
    prev = START
    for i in range(n):
        b.add_node(f"n{i}", lambda s, i=i: {"messages": [f"node {i}: a small message"]})
        b.add_edge(prev, f"n{i}")
        prev = f"n{i}"
    b.add_edge(prev, END)
    return b


def _timed_invoke(graph: Any, durability: str) -> float:
    """Seconds one invoke of `graph` on a new thread takes."""
    s = time.perf_counter()
    graph.invoke(
        {"messages": []}, {"configurable": {"thread_id": uuid.uuid4().hex}}, durability=durability
    )
    return time.perf_counter() - s


def part_a(runs: int) -> None:
    """Every saver's graph runs once per round, in a shuffled order, so that the load of a
    shared machine drifting during the part weighs on all of them alike (measuring one saver
    after another made the ratios swing by 2x between runs)."""
    builder = line_graph()
    rng = random.Random(42)
    for durability in ("sync", "exit"):
        savers = {name: make() for name, make in SAVERS.items()}
        graphs = {name: builder.compile(checkpointer=s) for name, s in savers.items()}

        for g in graphs.values():
            for _ in range(5):
                _timed_invoke(g, durability)
        times: dict[str, list[float]] = {name: [] for name in graphs}
        order = list(graphs)
        for _ in range(runs):
            rng.shuffle(order)
            for name in order:
                times[name].append(_timed_invoke(graphs[name], durability))
        for saver in savers.values():
            close(saver)
        rows: dict[str, float | None] = {n: med(t) * 1e3 for n, t in times.items()}
        table(f"(a) 10-node graph, durability={durability}: median invoke", "ms", rows)
        base = rows["memory"] or 0
        print(
            "    per node-step over memory: "
            + ", ".join(
                f"{n} {((v or 0) - base) / 10 * 1000:+.0f} us"
                for n, v in rows.items()
                if n != "memory"
            )
        )


def _cp(values: dict[str, Any], versions: dict[str, Any], step: int) -> Any:
    return {"v": 4, "id": str(uuid6(clock_seq=step)), "ts": datetime.now(UTC).isoformat(),
            "channel_values": values, "channel_versions": dict(versions),
            "versions_seen": {"n0": dict(versions)}, "updated_channels": list(values)}  # fmt: skip


def fill(
    saver: Any,
    tid: str,
    n: int,
    values_fn: Callable[[int], dict[str, Any]],
    changed: Callable[[int], list[str]],
    times: list[float] | None = None,
) -> list[Any]:
    versions: dict[str, Any] = {}
    cfg: Any = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
    out = []
    for i in range(n):
        values = values_fn(i)
        new = {}
        for ch in changed(i) if i else list(values):
            versions[ch] = saver.get_next_version(versions.get(ch), None)
            new[ch] = versions[ch]
        cp = _cp(values, versions, i)
        s = time.perf_counter()
        cfg = saver.put(cfg, cp, {"source": "loop", "step": i, "parents": {}}, new)
        if times is not None:
            times.append(time.perf_counter() - s)
        out.append(cfg)
    return out


def _small(i: int) -> dict[str, Any]:
    return {"messages": [f"message {k} of step {i}" for k in range(10)], "counter": i}


def part_b(n_cp: int) -> None:
    res: dict[str, dict[str, float | None]] = {}
    for name, make in SAVERS.items():
        s = make()
        put_t: list[float] = []
        configs = fill(s, "b", n_cp, _small, lambda i: ["messages", "counter"], put_t)
        pw = []
        for c in configs[:300]:
            t = time.perf_counter()
            s.put_writes(
                c, [("messages", ["w"]), ("counter", 1)], task_id=uuid.uuid4().hex, task_path="~n0"
            )
            pw.append(time.perf_counter() - t)
        latest: Any = {"configurable": {"thread_id": "b", "checkpoint_ns": ""}}

        def timed(fn: Callable[[], Any], reps: int) -> float:
            xs = []
            for _ in range(reps):
                t = time.perf_counter()
                fn()
                xs.append(time.perf_counter() - t)
            return med(xs)

        r = res.setdefault(name, {})
        r["put us"] = med(put_t) * 1e6
        r["put_writes us"] = med(pw) * 1e6
        r["get_tuple latest us"] = timed(lambda: s.get_tuple(latest), 200) * 1e6  # noqa: B023
        r["get_tuple by id us"] = timed(lambda: s.get_tuple(configs[len(configs) // 3]), 200) * 1e6  # noqa: B023
        r["list all ms"] = timed(lambda: sum(1 for _ in s.list(latest)), 3) * 1e3  # noqa: B023
        r["list limit=10 us"] = timed(lambda: list(s.list(latest, limit=10)), 50) * 1e6  # noqa: B023
        r["list before+10 us"] = (
            timed(lambda: list(s.list(latest, before=configs[n_cp // 2], limit=10)), 50) * 1e6  # noqa: B023
        )
        r["filter step ms"] = (
            timed(lambda: list(s.list(latest, filter={"step": n_cp // 2})), 5) * 1e3  # noqa: B023
        )
        b = stored_bytes(s)
        r["bytes/checkpoint"] = None if b is None else b / n_cp
        close(s)
    for metric in next(iter(res.values())):
        table(
            f"(b) {n_cp} checkpoints, one thread: {metric}",
            "",
            {n: v[metric] for n, v in res.items()},
        )


def part_c(size: int, n_put: int) -> None:
    msgs = [AIMessage(content=("x" * 110) + f" #{k:06d}", id=f"m{k}") for k in range(size)]
    put_rows: dict[str, float | None] = {}
    byte_rows: dict[str, float | None] = {}
    for name, make in SAVERS.items():
        s = make()
        times: list[float] = []
        fill(
            s, "c", n_put, lambda i: {"messages": msgs, "counter": i}, lambda i: ["counter"], times
        )
        put_rows[name] = med(times[1:]) * 1e6
        b = stored_bytes(s)
        byte_rows[name] = None if b is None else b / n_put / 1000
        close(s)
    table(f"(c2) {size}-message state, only counter changed: put", "us", put_rows)
    table(
        f"(c2) {size}-message state, only counter changed: stored per checkpoint", "kB", byte_rows
    )


async def _arun(make: Callable[[], Any], inflight: int, n: int) -> float:
    saver = make()
    g = line_graph().compile(checkpointer=saver)
    sem = asyncio.Semaphore(inflight)

    async def one() -> None:
        async with sem:
            await g.ainvoke(
                {"messages": []},
                {"configurable": {"thread_id": uuid.uuid4().hex}},
                durability="sync",
            )

    await asyncio.gather(*(one() for _ in range(5)))
    t = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    rate = n / (time.perf_counter() - t)
    if hasattr(saver, "aclose") and not isinstance(saver, RewindSaver):
        await saver.aclose()
    if isinstance(saver, RewindSaver):
        close(saver)
    return rate


def part_d(n: int) -> None:
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph_checkpoint_plainredis import AsyncRedisSaver

    conns: list[Any] = []

    def aiosqlite_saver() -> Any:
        conn = aiosqlite.connect(f"{ROOT}/{uuid.uuid4().hex}.sqlite")
        conns.append(conn)
        return AsyncSqliteSaver(conn)

    makers: dict[str, Callable[[], Any]] = {
        "memory": InMemorySaver,
        "AsyncSqliteSaver": aiosqlite_saver,
        "plainredis": lambda: AsyncRedisSaver(
            url=bench_redis_url(), prefix="abench" + uuid.uuid4().hex[:8]
        ),
        "Rewind/sqlite": _rewind_sqlite,
        "Rewind/redis": _rewind_redis,
    }

    async def main() -> None:
        for inflight in (1, 16):
            rows: dict[str, float | None] = {}
            for name, make in makers.items():
                if name == "AsyncSqliteSaver":
                    saver_conn = aiosqlite.connect(f"{ROOT}/{uuid.uuid4().hex}.sqlite")
                    await saver_conn.__aenter__()
                    rows[name] = await _arun(lambda c=saver_conn: AsyncSqliteSaver(c), inflight, n)
                    await saver_conn.close()
                else:
                    rows[name] = await _arun(make, inflight, n)
            table(f"(d) ainvoke, {inflight} in flight (higher is better)", "inv/s", rows, False)

    asyncio.run(main())


def part_e(turns: int) -> None:
    g_builder = StateGraph(Line)
    g_builder.add_node("chat", lambda s: {"messages": ["u" * 120, "a" * 120]})
    g_builder.add_edge(START, "chat")
    g_builder.add_edge("chat", END)
    rows: dict[str, float | None] = {}
    lat: dict[str, str] = {}
    for name, make in SAVERS.items():
        s = make()
        g = g_builder.compile(checkpointer=s)
        cfg = {"configurable": {"thread_id": "e"}}
        times = []
        for _ in range(turns):
            t = time.perf_counter()
            g.invoke({"messages": []}, cfg)
            times.append(time.perf_counter() - t)
        b = stored_bytes(s)
        rows[name] = None if b is None else b / 1e3
        lat[name] = f"{med(times[:20]) * 1e3:.1f} -> {med(times[-20:]) * 1e3:.1f} ms"
        close(s)
    table(f"(e) one thread, {turns} turns x 2 appended messages: stored", "kB", rows)
    print(
        "    median invoke first 20 -> last 20 turns: "
        + "; ".join(f"{k} {v}" for k, v in lat.items())
    )


def part_f(hold: float) -> None:
    results = {}
    for name in ("SqliteSaver", "Rewind/sqlite"):
        path = f"{ROOT}/{uuid.uuid4().hex}.db"
        saver = (
            SqliteSaver(sqlite3.connect(path, check_same_thread=False))
            if name == "SqliteSaver"
            else RewindSaver(f"sqlite:///{path}")
        )
        g = line_graph(3).compile(checkpointer=saver)
        g.invoke({"messages": []}, {"configurable": {"thread_id": "warm"}})
        other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")
        timer = threading.Timer(hold, lambda o=other: o.execute("COMMIT"))
        timer.start()
        try:
            g.invoke({"messages": []}, {"configurable": {"thread_id": "f"}})
            results[name] = "ok"
        except Exception as exc:
            results[name] = f"FAILED: {type(exc).__name__}: {exc}"
        timer.join()
        other.close()
        close(saver)
    print(
        f"\n(f) another connection holds the write lock {hold:.0f} s: "
        + "; ".join(f"{k}: {v}" for k, v in results.items())
    )


def part_g(threads: int) -> None:
    """`list(None, limit=10)`: the newest checkpoints across `threads` threads of 2 each."""
    rows: dict[str, float | None] = {}
    for name, make in SAVERS.items():
        if "redis" in name:
            continue
        s = make()
        for t in range(threads):
            fill(s, f"g{t}", 2, lambda i: {"counter": i}, lambda i: ["counter"])
        xs = []
        for _ in range(20):
            t0 = time.perf_counter()
            got = list(s.list(None, limit=10))
            xs.append(time.perf_counter() - t0)
        assert len(got) == 10
        rows[name] = med(xs) * 1e6
        close(s)
    table(f"(g) list(None, limit=10) over {threads} threads x 2 checkpoints", "us", rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true", help="smaller sizes, skip the 6 s lock probe")
    p.add_argument("--parts", default="abcdefg")
    p.add_argument("--savers", help="comma-separated names to run (memory is always kept)")
    p.add_argument(
        "--baseline",
        metavar="DIR",
        help="DIR holds an older copy of the package renamed agentrewind_langgraph_base: "
        "run it beside as Rewind/sqlite@base (before/after in one run)",
    )
    p.add_argument(
        "--with-no-defer",
        action="store_true",
        help="also run Rewind/sqlite and Rewind/redis with defer_writes=False (one write per "
        "put_writes, as before 0.3) beside the default, for before/after in one run",
    )
    a = p.parse_args()
    if a.with_no_defer:
        SAVERS["Rewind/sqlite/no-defer"] = lambda: _rewind_sqlite(defer_writes=False)
        SAVERS["Rewind/redis/no-defer"] = lambda: _rewind_redis(defer_writes=False)
    if a.baseline:
        import sys

        sys.path.insert(0, a.baseline)
        from agentrewind_langgraph_base import RewindSaver as BaseSaver

        SAVERS["Rewind/sqlite@base"] = lambda: BaseSaver(f"sqlite:///{ROOT}/{uuid.uuid4().hex}.db")
    if a.savers:
        keep = {"memory", "Rewind/sqlite@base", *a.savers.split(",")}
        keep |= {f"{n}/no-defer" for n in keep}
        for name in [n for n in SAVERS if n not in keep]:
            del SAVERS[name]
    q = a.quick
    t0 = time.perf_counter()
    if "a" in a.parts:
        part_a(40 if q else 100)
    if "b" in a.parts:
        part_b(300 if q else 1000)
    if "c" in a.parts:
        part_c(1000, 20 if q else 50)
    if "d" in a.parts:
        part_d(60 if q else 200)
    if "e" in a.parts:
        part_e(60 if q else 200)
    if "g" in a.parts:
        part_g(2000 if q else 10_000)
    if "f" in a.parts and not q:
        part_f(6.0)
    if "d" in a.parts:
        # The async plainredis anchor has no sync client to clean up with: sweep its prefix.
        import redis

        client = redis.Redis.from_url(bench_redis_url())
        _delete_prefix(client, "abench")
        client.close()
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
