"""RewindSaver on PostgreSQL beside PostgresSaver / AsyncPostgresSaver and InMemorySaver.

One process, one scratch database (`agentrewind_bench_<pid>_<rand>`, dropped at the end), the
savers interleaved so that a shared machine's drifting load weighs on all of them alike:
  a  10-node line graph, durability="sync": median invoke, x memory
  b  one thread grown to 100 / 1,000 / 10,000 checkpoints: put (median of the last 100),
     latest get_tuple and list(limit=10) at each size
  c  core journal: `run.step` (started + completed writes) and a replay hit, per step
  d  async API: 10-node graph via ainvoke, 16 in flight (invokes/s; AsyncPostgresSaver on a pool)
  e  one thread, 200 turns appending 2 messages of 120 random characters: stored bytes
     (sum of pg_column_size over the saver's rows, i.e. after TOAST compression)
  f  metadata filter `list(None, filter=...)` across 100,000 checkpoints (10,000 threads)

Usage: python benchmarks/postgres_bench.py [--quick] [--parts abcde]
       (server: $AGENTREWIND_TEST_POSTGRES, default postgresql://postgres@127.0.0.1:5432/postgres)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import secrets
import time
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph_bench import _cp, _small, _timed_invoke, line_graph, med, table
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from agentrewind_langgraph import RewindSaver

SERVER = os.environ.get(
    "AGENTREWIND_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def _db_url(name: str) -> str:
    return urlunsplit(urlsplit(SERVER)._replace(path=f"/{name}"))


class Anchor:
    """PostgresSaver on its own autocommit connection, as `from_conn_string` opens it."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row)
        self.saver = PostgresSaver(self.conn)
        self.saver.setup()

    def close(self) -> None:
        self.conn.close()


NO_DEFER = False
"""`--with-no-defer`: also run RewindSaver with `defer_writes=False` (before/after)."""


def savers(url: str) -> dict[str, Callable[[], Any]]:
    def rewind(durability: str = "full", defer: bool = True) -> Callable[[], Any]:
        return lambda: RewindSaver(
            f"{url}?namespace=b{uuid.uuid4().hex[:8]}&durability={durability}",
            defer_writes=defer,
        )

    out = {
        "memory": InMemorySaver,
        "PostgresSaver": lambda: Anchor(url),
        "Rewind/pg": rewind(),
        "Rewind/pg-normal": rewind("normal"),
    }
    if NO_DEFER:
        out["Rewind/pg/no-defer"] = rewind(defer=False)
        out["Rewind/pg-normal/no-defer"] = rewind("normal", defer=False)
    return out


def _saver(obj: Any) -> Any:
    return obj.saver if isinstance(obj, Anchor) else obj


def _close(obj: Any) -> None:
    if hasattr(obj, "close"):
        obj.close()


def part_a(url: str, runs: int) -> None:
    builder = line_graph()
    rng = random.Random(42)
    objs = {name: make() for name, make in savers(url).items()}
    graphs = {name: builder.compile(checkpointer=_saver(o)) for name, o in objs.items()}
    for g in graphs.values():
        for _ in range(5):
            _timed_invoke(g, "sync")
    times: dict[str, list[float]] = {name: [] for name in graphs}
    order = list(graphs)
    for _ in range(runs):
        rng.shuffle(order)
        for name in order:
            times[name].append(_timed_invoke(graphs[name], "sync"))
    for o in objs.values():
        _close(o)
    rows: dict[str, float | None] = {n: med(t) * 1e3 for n, t in times.items()}
    table('(a) 10-node graph, durability="sync": median invoke', "ms", rows)
    anchor = rows["PostgresSaver"] or 1.0
    print("    vs PostgresSaver: " + ", ".join(
        f"{n} x{(v or 0) / anchor:.2f}" for n, v in rows.items() if n.startswith("Rewind")
    ))  # fmt: skip
    base = rows["memory"] or 0.0
    print("    per node-step over memory: " + ", ".join(
        f"{n} {((v or 0) - base) / 10 * 1000:+.0f} us" for n, v in rows.items() if n != "memory"
    ))  # fmt: skip


class _Thread:
    """One saver's growing thread: its config and channel versions."""

    def __init__(self, saver: Any) -> None:
        self.saver = saver
        self.cfg: Any = {"configurable": {"thread_id": "b", "checkpoint_ns": ""}}
        self.versions: dict[str, Any] = {}

    def put(self, i: int) -> float:
        """Put checkpoint `i` (both channels changed); seconds it took."""
        new = {}
        for ch in ("messages", "counter"):
            self.versions[ch] = self.saver.get_next_version(self.versions.get(ch), None)
            new[ch] = self.versions[ch]
        cp = _cp(_small(i), self.versions, i)
        md = {"source": "loop", "step": i, "parents": {}}
        t = time.perf_counter()
        self.cfg = self.saver.put(self.cfg, cp, md, new)
        return time.perf_counter() - t


def part_b(url: str, sizes: list[int]) -> None:
    """The savers take turns, one put (or read) each per round, in a shuffled order."""
    objs = {name: make() for name, make in savers(url).items()}
    threads = {name: _Thread(_saver(o)) for name, o in objs.items()}
    rng = random.Random(7)
    order = list(objs)
    done = 0
    latest: Any = {"configurable": {"thread_id": "b", "checkpoint_ns": ""}}
    for size in sizes:
        put_t: dict[str, list[float]] = {n: [] for n in objs}
        for i in range(done, size):
            rng.shuffle(order)
            for name in order:
                put_t[name].append(threads[name].put(i))
        done = size
        get_t: dict[str, list[float]] = {n: [] for n in objs}
        list_t: dict[str, list[float]] = {n: [] for n in objs}
        for rep in range(200):
            rng.shuffle(order)
            for name in order:
                s = threads[name].saver
                t = time.perf_counter()
                s.get_tuple(latest)
                get_t[name].append(time.perf_counter() - t)
                if rep % 4 == 0:
                    t = time.perf_counter()
                    list(s.list(latest, limit=10))
                    list_t[name].append(time.perf_counter() - t)
        for title, times in (("put (last 100)", {n: v[-100:] for n, v in put_t.items()}),
                             ("latest get_tuple", get_t), ("list(limit=10)", list_t)):  # fmt: skip
            rows: dict[str, float | None] = {n: med(v) * 1e6 for n, v in times.items()}
            table(f"(b) {size} checkpoints, one thread: {title}", "us", rows)
            anchor = rows["PostgresSaver"] or 1.0
            print("    vs PostgresSaver: " + ", ".join(
                f"{n} x{(v or 0) / anchor:.2f}" for n, v in rows.items() if n.startswith("Rewind")
            ))  # fmt: skip
    for o in objs.values():
        _close(o)


def timed(fn: Callable[[], Any], reps: int) -> float:
    xs = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        xs.append(time.perf_counter() - t)
    return med(xs)


def part_c(url: str, steps: int) -> None:
    from core_bench import bench_backend

    rows = {
        "postgres": bench_backend(f"{url}?namespace=j{uuid.uuid4().hex[:6]}", steps),
        "postgres-normal": bench_backend(
            f"{url}?namespace=j{uuid.uuid4().hex[:6]}&durability=normal", steps
        ),
    }
    print(f"\n(c) core journal, {steps} steps: median us per step")
    for name, r in rows.items():
        print(
            f"  {name:<16} step record {r['step record']:>8.0f} us   call record "
            f"{r['call record']:>8.0f} us   replay hit {r['replay hit']:>6.1f} us"
        )
    # The floor on this server: one single-row INSERT and its commit, same run.
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_floor (i int PRIMARY KEY, v text)")
        floor = []
        for i in range(200):
            t = time.perf_counter()
            conn.execute("INSERT INTO bench_floor VALUES (%s, 'x')", (i,))
            floor.append(time.perf_counter() - t)
        conn.execute("DROP TABLE bench_floor")
    print(f"  floor: one INSERT + commit (fsync) {med(floor) * 1e6:>8.0f} us on this server now")
    print("    anchor: DBOS on Postgres 2,729 us per step (research, not this run); goal <= 400 us")


def part_d(url: str, n: int, inflight: int = 16) -> None:
    async def run(make: Callable[[], Any]) -> float:
        saver = await make()
        g = line_graph().compile(checkpointer=saver)
        sem = asyncio.Semaphore(inflight)

        async def one() -> None:
            async with sem:
                cfg = {"configurable": {"thread_id": uuid.uuid4().hex}}
                await g.ainvoke({"messages": []}, cfg, durability="sync")

        await asyncio.gather(*(one() for _ in range(5)))
        t = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        rate = n / (time.perf_counter() - t)
        closer = getattr(saver, "_bench_close", None) or getattr(saver, "aclose", None)
        if closer is not None:
            await closer()
        return rate

    async def memory() -> Any:
        return InMemorySaver()

    async def anchor() -> Any:
        pool = AsyncConnectionPool(
            url,
            max_size=8,
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
            open=False,
        )
        await pool.open()
        saver = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
        await saver.setup()
        saver._bench_close = pool.close  # type: ignore[attr-defined]
        return saver

    async def rewind() -> Any:
        return RewindSaver(f"{url}?namespace=d{uuid.uuid4().hex[:8]}")

    async def main() -> None:
        rows: dict[str, float | None] = {}
        for name, make in (("memory", memory), ("AsyncPostgresSaver", anchor),
                           ("Rewind/pg", rewind)):  # fmt: skip
            rows[name] = await run(make)
        table(f"(d) ainvoke, {inflight} in flight (higher is better)", "inv/s", rows, False)
        anchor_rate = rows["AsyncPostgresSaver"] or 1.0
        print(f"    Rewind/pg vs AsyncPostgresSaver: x{(rows['Rewind/pg'] or 0) / anchor_rate:.2f}")

    asyncio.run(main())


def _rows_bytes(url: str, tables: list[str], where: str, args: tuple[Any, ...]) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return sum(
            int(
                conn.execute(
                    f"SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM {t} t {where}", args
                ).fetchone()[0]
            )
            for t in tables
        )


def part_e(url: str, turns: int) -> None:
    from langgraph.graph import END, START, StateGraph
    from langgraph_bench import Line

    def chat(_: Any) -> dict[str, Any]:
        return {"messages": [secrets.token_urlsafe(90), secrets.token_urlsafe(90)]}

    builder = StateGraph(Line)
    builder.add_node("chat", chat)
    builder.add_edge(START, "chat")
    builder.add_edge("chat", END)
    rows: dict[str, float | None] = {}
    for name, make in savers(url).items():
        if name == "Rewind/pg-normal":
            continue
        o = make()
        g = builder.compile(checkpointer=_saver(o))
        cfg = {"configurable": {"thread_id": "e"}}
        for _ in range(turns):
            g.invoke({"messages": []}, cfg)
        if name == "memory":
            rows[name] = None
        elif name == "PostgresSaver":
            tables = ["checkpoints", "checkpoint_blobs", "checkpoint_writes"]
            rows[name] = _rows_bytes(url, tables, "WHERE thread_id = %s", ("e",)) / 1e3
        else:
            s = _saver(o)
            names = ("lg_checkpoints", "lg_blobs", "lg_writes")
            tables = [s.store.render(f"{{s}}.{t}") for t in names]
            where = "WHERE ns = %s AND thread_id = %s"
            rows[name] = _rows_bytes(url, tables, where, (s.store.namespace, "e")) / 1e3
        _close(o)
    table(f"(e) one thread, {turns} turns x 2 random 120-char messages: stored", "kB", rows)


def part_f(url: str, n: int) -> None:
    """One real checkpoint per saver, copied in SQL to `n` across `n // 10` threads, each
    with its own `user` in the metadata; then `list(None, filter=...)` matching 10 rows."""
    pick = ("PostgresSaver", "Rewind/pg")
    objs = {name: make() for name, make in savers(url).items() if name in pick}
    seeds = {name: _Thread(_saver(o)) for name, o in objs.items()}
    for t in seeds.values():
        t.put(0)
    copies = {
        "PostgresSaver": """INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id,
            parent_checkpoint_id, type, checkpoint, metadata)
            SELECT 'f' || (g / 10), '', lpad(g::text, 12, '0'), NULL, type, checkpoint,
                jsonb_build_object('source', 'loop', 'step', g %% 10, 'user', 'u' || (g / 10))
            FROM (SELECT * FROM checkpoints WHERE thread_id = 'b' LIMIT 1) c,
                generate_series(1, %(n)s) g""",
        "Rewind/pg": """INSERT INTO {s}.lg_checkpoints (ns, thread_id, cns, checkpoint_id,
            parent_id, run_id, cp_type, checkpoint, versions, metadata, md_type, md_blob)
            SELECT ns, 'f' || (g / 10), '', lpad(g::text, 12, '0'), NULL, NULL, cp_type,
                checkpoint, versions,
                jsonb_build_object('source', 'loop', 'step', g %% 10, 'user', 'u' || (g / 10)),
                md_type, md_blob
            FROM (SELECT * FROM {s}.lg_checkpoints WHERE ns = %(ns)s AND thread_id = 'b'
                LIMIT 1) c, generate_series(1, %(n)s) g""",
    }
    with psycopg.connect(url, autocommit=True) as conn:
        for name, sql in copies.items():
            s = _saver(objs[name])
            ns = getattr(getattr(s, "store", None), "namespace", "")
            if name.startswith("Rewind"):
                sql = s.store.render(sql)
            conn.execute(sql, {"n": n, "ns": ns})
        conn.execute("ANALYZE")
    times: dict[str, list[float]] = {name: [] for name in objs}
    rng = random.Random(3)
    order = list(objs)
    for _ in range(40):
        user = f"u{rng.randrange(n // 10)}"
        rng.shuffle(order)
        for name in order:
            s = _saver(objs[name])
            t = time.perf_counter()
            found = list(s.list(None, filter={"source": "loop", "user": user}))
            times[name].append(time.perf_counter() - t)
            assert len(found) == 10 or user == "u0", (name, len(found))
    for o in objs.values():
        _close(o)
    rows: dict[str, float | None] = {name: med(v) * 1e3 for name, v in times.items()}
    table(f"(f) metadata filter across {n:,} checkpoints (10 match)", "ms", rows)
    ratio = (rows["Rewind/pg"] or 0) / (rows["PostgresSaver"] or 1)
    print(f"    Rewind/pg vs PostgresSaver: x{ratio:.2f}   goal <= 2 ms")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true", help="smaller sizes")
    p.add_argument("--parts", default="abcdef")
    p.add_argument("--with-no-defer", action="store_true", help="also defer_writes=False")
    p.add_argument("--db-prefix", default="agentrewind_bench", help="scratch database name prefix")
    a = p.parse_args()
    global NO_DEFER
    NO_DEFER = a.with_no_defer
    name = f"{a.db_prefix}_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(SERVER, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = _db_url(name)
    t0 = time.perf_counter()
    try:
        if "a" in a.parts:
            part_a(url, 30 if a.quick else 100)
        if "b" in a.parts:
            part_b(url, [100, 1000] if a.quick else [100, 1000, 10000])
        if "c" in a.parts:
            part_c(url, 200 if a.quick else 1000)
        if "d" in a.parts:
            part_d(url, 60 if a.quick else 200)
        if "e" in a.parts:
            part_e(url, 60 if a.quick else 200)
        if "f" in a.parts:
            part_f(url, 10_000 if a.quick else 100_000)
    finally:
        with psycopg.connect(SERVER, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
