"""Core overhead: median µs per recorded step and per replay hit, per backend, beside DBOS.

Run: `python benchmarks/core_bench.py [--steps N] [--no-dbos]` (the nox `bench` session).

For each backend (memory, SQLite with durability NORMAL and FULL, and a Redis of its own
started by _bench_redis) it times, call by call:

* step record: `run.step(name, fn, i)` on a new run. A plain step has side effects, so it
  writes a `started` record before `fn` and a `completed` record after (2 writes).
* call record: a step decorated with `side_effects=False` (how LLM calls are recorded:
  1 write).
* replay hit: the same steps in a new execution of the run, answered from the journal.

With `--open-steps N` (default 100,000; 0 skips it) it also opens a recorded run of N steps on
SQLite (written with `put_steps` in batches, each record shaped like one `run.step` writes):
the seconds `mw.run(run_id)` takes to enter (median of 3), and the memory the open run holds
per step (tracemalloc, in another open; goal: <= 0.3 s and <= 0.25 KB per step), beside what
decoding every record (how a run opened before) takes.

Costs that must not grow with history (`_bench_history.py`, in a process of its own, each
figure beside its anchor measured in that process), on SQLite, Redis and PostgreSQL
($AGENTREWIND_TEST_POSTGRES, default postgresql://postgres@127.0.0.1:5432/postgres; skipped
with a note when unreachable): `list_runs(limit=50)` over `--list-runs` runs (default 10,000;
0 skips; goal <= 2 ms) beside reading every run (the old Redis `list_runs`), with the SQL
stores' query plans; and the `--open-steps` open on each store beside decoding every record.

The SQLite journal is also measured beside main's layout (schema V1, `_sqlite_layouts`), in
interleaved rounds: WAL pages per journal write, µs per journal step, and that open.

`fn` does nothing, so the figures are pure middleware + store cost. DBOS (the anchor) is timed
in the same run on a SQLite system database when the `dbos` package is installed: a `@DBOS.step`
inside a `@DBOS.workflow`, and its replay through `DBOS.fork_workflow`; otherwise its
documented figure is printed, labelled as quoted.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Callable
from pathlib import Path

from _bench_history import print_history, run_history
from _bench_redis import bench_redis_url
from _sqlite_layouts import compare as compare_sqlite_layouts
from _sqlite_layouts import report as report_sqlite_layouts

import agentrewind

GOALS = {"record": {"sqlite-normal": 200.0, "redis": 300.0}, "replay": 50.0}
OPEN_GOALS = {"seconds": 0.3, "kb_per_step": 0.25}
DBOS_QUOTED = "1700-1800"
PG_URL = os.environ.get(
    "AGENTREWIND_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def _median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def _noop(i: int) -> int:
    return i


def bench_backend(url: str, steps: int) -> dict[str, float]:
    """Return median µs for step record, call record and replay hit on one store."""
    mw = agentrewind.Middleware(url)
    call = mw.step("call", side_effects=False)(_noop)
    record: list[float] = []
    record_call: list[float] = []
    replay: list[float] = []
    warm = min(50, steps // 10)
    clock = time.perf_counter
    try:
        with mw.run("bench") as run:
            for i in range(steps + warm):
                t0 = clock()
                run.step("work", _noop, i)
                t1 = clock()
                call(i)
                t2 = clock()
                if i >= warm:
                    record.append(t1 - t0)
                    record_call.append(t2 - t1)
        with mw.run("bench") as run:
            for i in range(steps + warm):
                t0 = clock()
                run.step("work", _noop, i)
                t1 = clock()
                if i >= warm:
                    replay.append(t1 - t0)
            assert run.metrics.replay_hits == steps + warm, run.metrics
        mw.store.delete_run("bench")
    finally:
        mw.close()
    return {
        "step record": _median_us(record),
        "call record": _median_us(record_call),
        "replay hit": _median_us(replay),
    }


def bench_dbos(directory: Path, steps: int) -> dict[str, float] | str:
    """Time DBOS on a SQLite system database in this process; a reason string if it can't."""
    try:
        from dbos import DBOS, SetWorkflowID
    except ImportError:
        return "the dbos package is not installed"

    record: list[float] = []
    replay: list[float] = []
    executed: list[int] = []
    samples = record

    @DBOS.step()
    def work(i: int) -> int:
        executed.append(i)
        return i

    @DBOS.workflow()
    def workflow(n: int) -> int:
        for i in range(n):
            t0 = time.perf_counter()
            work(i)
            samples.append(time.perf_counter() - t0)
        return n

    db = directory / "dbos.sqlite"
    DBOS(
        config={
            "name": "core-bench",
            "system_database_url": f"sqlite:///{db}",
            "log_level": "WARNING",
        }
    )
    try:
        DBOS.launch()
        warm = min(50, steps // 10)
        total = steps + warm
        wf_id = f"bench-{uuid.uuid4().hex}"
        with SetWorkflowID(wf_id):
            workflow(total)
        samples = replay
        executed.clear()
        # Steps are numbered from 1; forking after the last one replays every step.
        handle = DBOS.fork_workflow(wf_id, total + 1)
        assert handle.get_result() == total
        if executed:
            return "DBOS.fork_workflow re-executed steps; its replay could not be timed"
        return {
            "step record": _median_us(record[warm:]),
            "replay hit": _median_us(replay[warm:]),
        }
    finally:
        DBOS.destroy()


def _redis_available() -> str | None:
    try:
        agentrewind.connect(bench_redis_url()).close()
    except (agentrewind.StoreUnavailableError, ImportError, RuntimeError) as exc:
        return str(exc)
    return None


def _cleanup_redis(prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(bench_redis_url())
    try:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


def _redis_round_trip_us() -> float:
    """Median PING round trip to the benchmark's Redis: the floor under every Redis write."""
    import redis

    client = redis.Redis.from_url(bench_redis_url())
    try:
        samples = []
        for _ in range(1000):
            t0 = time.perf_counter()
            client.ping()
            samples.append(time.perf_counter() - t0)
        return _median_us(samples)
    finally:
        client.close()


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def record_open_run(store: agentrewind.Store, steps: int) -> None:
    """Record run "open" of `steps` steps, each shaped like one `run.step` writes."""
    from agentrewind.ids import new_id
    from agentrewind.records import RunMetrics, StepRecord

    now = time.time()
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


def bench_open(url: str, steps: int) -> dict[str, float]:
    """Seconds to open a recorded run of `steps` steps, and KB per step the open run holds."""
    mw = agentrewind.Middleware(url)
    store = mw.store
    try:
        record_open_run(store, steps)
        opens = []
        for _ in range(3):  # the median of 3 opens: a shared machine drifts
            gc.collect()
            t0 = time.perf_counter()
            with mw.run("open"):
                opens.append(time.perf_counter() - t0)
        seconds = statistics.median(opens)
        # What opening did before the index, measured beside it: decode every record.
        gc.collect()
        t0 = time.perf_counter()
        records = store.load_steps("open")
        decoded_s = time.perf_counter() - t0
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
        "seconds": seconds,
        "kb_per_step": held / 1024 / steps,
        "decode_seconds": decoded_s,
        "decode_kb_per_step": decoded_held / 1024 / steps,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="timed steps per backend")
    parser.add_argument("--no-dbos", action="store_true", help="print DBOS's quoted figure")
    parser.add_argument(
        "--open-steps", type=int, default=100_000, help="steps of the run opened (0: skip)"
    )
    parser.add_argument(
        "--list-runs", type=int, default=10_000, help="runs of the listed namespace (0: skip)"
    )
    args = parser.parse_args(argv)

    started = time.perf_counter()
    results: dict[str, dict[str, float]] = {}
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="agentrewind-bench-") as tmp:
        directory = Path(tmp)
        backends: list[tuple[str, str, Callable[[], None]]] = [
            ("memory", "memory://bench", lambda: None),
            ("sqlite-normal", f"sqlite:///{directory / 'normal.db'}", lambda: None),
            ("sqlite-full", f"sqlite:///{directory / 'full.db'}?durability=full", lambda: None),
        ]
        missing = _redis_available()
        prefix = f"arbench-{uuid.uuid4().hex[:8]}"
        if missing is None:
            url = f"{bench_redis_url()}?prefix={prefix}&namespace=bench"
            backends.append(("redis", url, lambda: _cleanup_redis(prefix)))
        else:
            notes.append(f"redis skipped: {missing}")
        ping_us: float | None = None
        for name, url, cleanup in backends:
            try:
                if name == "redis":
                    ping_us = _redis_round_trip_us()
                results[name] = bench_backend(url, args.steps)
            finally:
                cleanup()
        opened = (
            bench_open(f"sqlite:///{directory / 'open.db'}", args.open_steps)
            if args.open_steps
            else None
        )
        history = {"sqlite": f"sqlite:///{directory / 'history.db'}?namespace=h"}
        if missing is None:
            history["redis"] = f"{bench_redis_url()}?prefix={prefix}&namespace=h"
        try:
            agentrewind.connect(PG_URL).close()
            history["postgres"] = f"{PG_URL}?namespace=h{uuid.uuid4().hex[:8]}"
        except (agentrewind.StoreUnavailableError, ImportError) as exc:
            notes.append(f"postgres skipped: {exc}")
        try:
            lists, opens = run_history(history, args.list_runs, args.open_steps)
        finally:
            if missing is None:
                _cleanup_redis(prefix)
        layouts = compare_sqlite_layouts(directory, args.steps, args.open_steps, record_open_run)
        dbos: dict[str, float] | str = (
            "--no-dbos given" if args.no_dbos else bench_dbos(directory, args.steps)
        )

    print(f"agentrewind core benchmark: {args.steps} timed steps per backend, median µs per call")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"python {sys.version.split()[0]}, agentrewind {agentrewind.__version__}, "
        f"{os.cpu_count()} CPUs, load average {load} (shared machines make these noisy)"
    )
    print()
    header = f"{'backend':<16}{'step record':>14}{'call record':>14}{'replay hit':>14}   goal"
    print(header)
    print("-" * (len(header) + 30))
    for name, row in results.items():
        goal_record = GOALS["record"].get(name)
        goal = f"record <= {goal_record:.0f}, " if goal_record else ""
        goal += f"replay <= {GOALS['replay']:.0f}"
        verdict = _verdict(row, goal_record)
        print(
            f"{name:<16}{_fmt(row['step record']):>14}{_fmt(row['call record']):>14}"
            f"{_fmt(row['replay hit']):>14}   {goal} {verdict}"
        )
    if isinstance(dbos, dict):
        print(
            f"{'DBOS sqlite':<16}{_fmt(dbos['step record']):>14}{'-':>14}"
            f"{_fmt(dbos['replay hit']):>14}   measured in this run "
            f"(anchor: {DBOS_QUOTED} µs per step)"
        )
    else:
        print(
            f"{'DBOS sqlite':<16}{DBOS_QUOTED:>14}{'-':>14}{'-':>14}   QUOTED anchor, not "
            f"measured here ({dbos})"
        )
    print()
    print("step record = run.step with side effects (started + completed writes);")
    print("call record = side_effects=False (one write, as for LLM calls); replay hit = answered")
    print("from the journal. Goals: record <= 200 µs SQLite NORMAL, <= 300 µs Redis; replay <= 50.")
    if ping_us is not None:
        print(
            f"redis: one PING round trip takes {ping_us:.1f} µs here; a call record is one "
            "round trip (one Lua script), a step record two."
        )
    if opened is not None:
        ok = (
            opened["seconds"] <= OPEN_GOALS["seconds"]
            and opened["kb_per_step"] <= OPEN_GOALS["kb_per_step"]
        )
        print(
            f"open a {args.open_steps}-step run (SQLite): {opened['seconds']:.3f} s, "
            f"{opened['kb_per_step']:.3f} KB held per step (goal <= {OPEN_GOALS['seconds']} s, "
            f"<= {OPEN_GOALS['kb_per_step']} KB) {'[met]' if ok else '[MISSED]'}"
        )
        print(
            f"  beside it, decoding every record (how a run opened before): "
            f"{opened['decode_seconds']:.3f} s, {opened['decode_kb_per_step']:.3f} KB per step"
        )
    print()
    for line in report_sqlite_layouts(layouts, args.open_steps):
        print(line)
    print_history(lists, opens, args.list_runs, args.open_steps)
    for note in notes:
        print(f"note: {note}")
    print(f"total {time.perf_counter() - started:.1f}s")
    return 0


def _verdict(row: dict[str, float], goal_record: float | None) -> str:
    ok = row["replay hit"] <= GOALS["replay"]
    if goal_record is not None:
        ok = ok and row["step record"] <= goal_record
    return "[met]" if ok else "[MISSED]"


if __name__ == "__main__":
    raise SystemExit(main())
