"""Costs that must not grow with history, for `core_bench.py`: listing runs and opening a run.

* `bench_list`: `list_runs(limit=50)` over a namespace of N runs (median of interleaved
  rounds), beside reading every run of the namespace (what Redis did before its runs index
  was scored by update time: the anchor, measured in the same rounds). The query plan of
  SQLite and PostgreSQL is printed too: both must read an index on (ns, updated_at)
  (PostgreSQL after ANALYZE: on a table it has no statistics of, it sorts the namespace).
* `bench_open`: seconds to open a recorded run of N steps and the memory the open run holds
  per step, beside decoding every record (how a run opened before).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import agentrewind

LIST_GOAL_MS = 2.0
OPEN_GOALS = {"seconds": 0.3, "kb_per_step": 0.25}


def _read_all(store: Any, limit: int) -> list[Any]:
    """Every run of the namespace read and sorted: the old Redis `list_runs`."""
    if store.scheme == "redis":
        from agentrewind.stores.redis._runs import list_page

        runs: list[Any] = list_page(store, limit, by_update=False)
        return runs
    return list(store.list_runs(limit=1_000_000)[:limit])


def _plan(store: Any) -> str:
    """How the store's `list_runs` query finds its rows (SQL stores), in one line."""
    if store.scheme == "sqlite":
        from agentrewind.stores.sqlite import _sql

        with store.db.read() as conn:
            rows = conn.execute("EXPLAIN QUERY PLAN " + _sql.LIST_RUNS, (store.namespace, 0, 50))
            return "; ".join(str(r[3]) for r in rows)
    if store.scheme == "postgresql":
        rows = store.db.fetchall("EXPLAIN " + store.sql("LIST_RUNS"), (store.namespace, 0, 50))
        return "; ".join(r[0].strip() for r in rows if "Scan" in r[0] or "Sort" in r[0])
    return "ZREVRANGE of a page of the runs index, then one script reads its hashes and leases"


def bench_list(url: str, runs: int, rounds: int = 15) -> dict[str, Any]:
    """Median ms of `list_runs(limit=50)` and of reading every run, over `runs` runs."""
    store: Any = agentrewind.connect(url)
    anchor: Any = agentrewind.connect(url)  # its own client: the full reads evict no cache of ours
    try:
        for i in range(runs):
            store.begin_run(f"run-{i:06d}")
        if store.scheme == "postgresql":  # fresh statistics, as autovacuum keeps them
            store.db.call(lambda conn: conn.execute(f"ANALYZE {store._q}.ar_runs"))
        new: list[float] = []
        old: list[float] = []
        for _ in range(rounds):  # interleaved: a shared machine drifts
            t0 = time.perf_counter()
            page = store.list_runs(limit=50)
            new.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            everything = _read_all(anchor, 50)
            old.append(time.perf_counter() - t0)
            assert [r.updated_at for r in page] == [r.updated_at for r in everything]
        plan = _plan(store)
        store.prune(keep_last=0, force=True)
    finally:
        anchor.close()
        store.close()
    return {
        "ms": statistics.median(new) * 1000,
        "all_ms": statistics.median(old) * 1000,
        "plan": plan,
    }


def bench_open(url: str, steps: int) -> dict[str, float]:
    """Seconds to open a recorded run of `steps` steps, and KB per step the open run holds."""
    from agentrewind.ids import new_id
    from agentrewind.records import RunMetrics, StepRecord

    mw = agentrewind.Middleware(url)
    store, now = mw.store, time.time()
    try:
        store.begin_run("open")
        batch: list[StepRecord] = []
        parent = None
        for i in range(steps):
            sid = new_id()
            batch.append(
                StepRecord(run_id="open", step_id=sid, key=f"custom:work:{i:020x}#0",
                           kind="custom", name="work", status="completed", seq=i + 1,
                           parent_id=parent, output={"answer": i},
                           meta={"duration": 0.00025}, created_at=now, updated_at=now)
            )  # fmt: skip
            parent = sid
            if len(batch) == 1000 or i == steps - 1:
                store.put_steps(batch)
                batch = []
        store.end_run("open", "completed", RunMetrics())
        opens, decodes = [], []
        for _ in range(3):  # interleaved, the median of 3: a shared machine drifts
            gc.collect()
            t0 = time.perf_counter()
            with mw.run("open"):
                opens.append(time.perf_counter() - t0)
            gc.collect()
            t0 = time.perf_counter()
            records = store.load_steps("open")  # how a run opened before the index
            decodes.append(time.perf_counter() - t0)
            del records
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        with mw.run("open"):
            gc.collect()
            held = tracemalloc.get_traced_memory()[0] - base
        gc.collect()
        base = tracemalloc.get_traced_memory()[0]
        records = store.load_steps("open")
        decoded_held = tracemalloc.get_traced_memory()[0] - base
        del records
        tracemalloc.stop()
        store.delete_run("open")
    finally:
        mw.close()
    return {
        "seconds": statistics.median(opens),
        "kb_per_step": held / 1024 / steps,
        "decode_seconds": statistics.median(decodes),
        "decode_kb_per_step": decoded_held / 1024 / steps,
    }


def run_history(urls: dict[str, str], runs: int, steps: int) -> tuple[dict[str, Any], ...]:
    """Both benchmarks on each store, in a process of their own.

    Timed in the process that ran the per-call benchmarks (or before them, in it), one section
    came out about 2x slower, anchors included: a fresh interpreter keeps them apart.
    """
    if not urls or not (runs or steps):
        return {}, {}
    argv = [sys.executable, str(Path(__file__)), json.dumps(urls), str(runs), str(steps)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the history benchmarks failed:\n{done.stderr}")
    lists, opens = json.loads(done.stdout.strip().splitlines()[-1])
    return lists, opens


def _main() -> None:
    parser = argparse.ArgumentParser(description="history benchmarks (run by core_bench.py)")
    parser.add_argument("urls", type=json.loads)
    parser.add_argument("runs", type=int)
    parser.add_argument("steps", type=int)
    args = parser.parse_args()
    lists = {n: bench_list(u, args.runs) for n, u in args.urls.items()} if args.runs else {}
    opens = {n: bench_open(u, args.steps) for n, u in args.urls.items()} if args.steps else {}
    print(json.dumps([lists, opens]))


def print_history(lists: dict[str, dict[str, Any]], opens: dict[str, dict[str, float]],
                  runs: int, steps: int) -> None:  # fmt: skip
    """Print the figures, each beside its anchor and goal."""
    if lists:
        print()
        print(f"list_runs(limit=50) over {runs:,} runs, median ms (goal <= {LIST_GOAL_MS} ms),")
        print("beside reading every run of the namespace (the old Redis list_runs):")
        for name, row in lists.items():
            met = "[met]" if row["ms"] <= LIST_GOAL_MS else "[MISSED]"
            ratio = row["all_ms"] / row["ms"] if row["ms"] else float("inf")
            print(
                f"  {name:<10}{row['ms']:>9.2f} ms   read all {row['all_ms']:>9.1f} ms "
                f"({ratio:,.0f}x)  {met}"
            )
            print(f"  {'':<10}plan: {row['plan']}")
    if opens:
        print()
        print(
            f"open a {steps:,}-step run: seconds (median of 3) and KB held per step (goals <= "
            f"{OPEN_GOALS['seconds']} s, <= {OPEN_GOALS['kb_per_step']} KB), beside decoding "
            "every record (the old open)"
        )
        for name, o in opens.items():
            ok = (
                o["seconds"] <= OPEN_GOALS["seconds"]
                and o["kb_per_step"] <= OPEN_GOALS["kb_per_step"]
            )
            ratio = o["decode_seconds"] / o["seconds"] if o["seconds"] else float("inf")
            print(
                f"  {name:<10}{o['seconds']:>7.3f} s {o['kb_per_step']:>6.3f} KB/step   decode "
                f"all {o['decode_seconds']:>6.3f} s {o['decode_kb_per_step']:>6.3f} KB/step "
                f"({ratio:.1f}x)  {'[met]' if ok else '[MISSED]'}"
            )


if __name__ == "__main__":
    _main()
