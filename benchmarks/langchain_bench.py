"""Per-call cost of the LangChain adapter, beside the unwrapped call (DESIGN.md §8).

Run:  python benchmarks/langchain_bench.py [--calls N] [--redis URL]

For a fake chat model's `invoke` and a tool's `invoke` it prints, in microseconds per call:
unwrapped (before any patch), patched but outside a wrapped run, recording inside a run,
and replaying inside a run, on SQLite and on Redis. "overhead" is the recording cost minus
the unwrapped call: what the middleware adds per recorded call (goal: <= 200 us on SQLite,
<= 300 us on Redis).
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool

from agentrewind_langchain import Middleware, install
from agentrewind_langchain.testing import ScriptedChatModel


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


MODEL = ScriptedChatModel(responses=["a short answer"])


def chat_call(i: int) -> Any:
    return MODEL.invoke(f"question {i}")


def tool_call(i: int) -> Any:
    return add.invoke({"a": i, "b": 1})


def per_call(fn: Callable[[int], Any], n: int, repeat: int = 3) -> float:
    """Best-of-`repeat` microseconds per call of `fn(0..n-1)` outside any run."""
    best = []
    for r in range(repeat):
        t0 = time.perf_counter()
        for i in range(n):
            fn(i + r * n)
        best.append((time.perf_counter() - t0) / n * 1e6)
    return min(best)


def in_run(mw: Middleware, fn: Callable[[int], Any], n: int) -> tuple[float, float]:
    """(record, replay) microseconds per call: n distinct calls in one wrapped run, twice."""
    run_id = f"bench-{uuid.uuid4().hex[:8]}"

    def body(_: Any) -> None:
        for i in range(n):
            fn(i)

    wrapped = mw.wrap(RunnableLambda(body))
    cfg = {"configurable": {"thread_id": run_id}}
    times = []
    for _ in range(2):
        t0 = time.perf_counter()
        wrapped.invoke(None, cfg)
        times.append((time.perf_counter() - t0) / n * 1e6)
    assert mw.metrics(run_id).replay_hits == n, "the second pass must replay every call"
    mw.store.delete_run(run_id)
    return times[0], times[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    n = args.calls

    cases = {"chat model.invoke": chat_call, "tool.invoke": tool_call}
    rows: dict[str, dict[str, float]] = {name: {} for name in cases}
    for name, fn in cases.items():
        per_call(fn, 50, 1)  # warm up
        rows[name]["unwrapped"] = per_call(fn, n)
    install()
    for name, fn in cases.items():
        rows[name]["patched, outside a run"] = per_call(fn, n)

    with tempfile.TemporaryDirectory() as tmp:
        stores = {"sqlite": f"sqlite:///{Path(tmp) / 'bench.db'}"}
        stores["redis"] = f"{args.redis}?namespace=bench-{uuid.uuid4().hex[:6]}"
        for label, url in stores.items():
            try:
                mw = Middleware(url)
                mw.store.list_runs(limit=1)
            except Exception as exc:  # no Redis here: say so and go on
                print(f"{label}: skipped ({exc})")
                continue
            for name, fn in cases.items():
                samples = [in_run(mw, fn, n) for _ in range(3)]
                rows[name][f"{label} record"] = min(s[0] for s in samples)
                rows[name][f"{label} replay"] = min(s[1] for s in samples)
            mw.close()

    print(f"\nper-call cost in microseconds ({n} calls, best of 3)\n")
    columns = list(next(iter(rows.values())).keys())
    print(f"{'':<20}" + "".join(f"{c:>24}" for c in columns))
    for name, row in rows.items():
        print(f"{name:<20}" + "".join(f"{row.get(c, float('nan')):>24.1f}" for c in columns))
    print()
    for name, row in rows.items():
        base = row["unwrapped"]
        parts = [f"outside a run {row['patched, outside a run'] - base:+.1f}"]
        for label in ("sqlite", "redis"):
            if f"{label} record" in row:
                parts.append(f"{label} record {row[f'{label} record'] - base:+.1f}")
                parts.append(f"{label} replay {row[f'{label} replay'] - base:+.1f}")
        print(f"overhead {name:<18} " + ", ".join(parts) + " us")


if __name__ == "__main__":
    main()
