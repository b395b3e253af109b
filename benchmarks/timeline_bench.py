"""checkpoint() latency at the 1st, 1,000th and 10,000th call: agentrewind vs agentstateprotocol.

Run: python benchmarks/timeline_bench.py [--calls 10000] [--stores memory,sqlite,redis]
    [--async-stores memory]
Each figure is the median of the calls in a window ending at that call (the 1st is one call).
The `acheckpoint` rows time the async twin awaited one call at a time (each call hops to the
store's worker thread and back).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _bench_redis import bench_redis_url

MARKS = (1, 1_000, 10_000)
WINDOW = 50


def state_for(i: int) -> dict[str, Any]:
    return {
        "step": i,
        "reasoning": "the user wants a laptop under $1000 with a good keyboard",
        "sources": ["reviews", "forums"],
        "scores": {"keyboard": 0.8, "battery": 0.6},
    }


def measure(checkpoint: Callable[[int], Any], calls: int) -> list[float]:
    times = []
    gc.disable()
    try:
        for i in range(calls):
            t0 = time.perf_counter()
            checkpoint(i)
            times.append(time.perf_counter() - t0)
    finally:
        gc.enable()
    return times


def ameasure(acheckpoint: Callable[[int], Awaitable[Any]], calls: int) -> list[float]:
    async def go() -> list[float]:
        times = []
        gc.disable()
        try:
            for i in range(calls):
                t0 = time.perf_counter()
                await acheckpoint(i)
                times.append(time.perf_counter() - t0)
        finally:
            gc.enable()
        return times

    return asyncio.run(go())


def at(times: list[float], mark: int) -> float:
    if mark > len(times):
        return float("nan")
    if mark == 1:
        return times[0]
    return statistics.median(times[max(0, mark - WINDOW) : mark])


def row(name: str, times: list[float], marks: tuple[int, ...]) -> str:
    cells = "  ".join(f"{at(times, m) * 1e6:>12.1f}" for m in marks)
    return f"{name:<34} {cells}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--stores", default="memory,sqlite")
    parser.add_argument("--async-stores", default="memory")
    parser.add_argument("--redis", default=None, help="default: a redis-server of its own")
    args = parser.parse_args()
    marks = tuple(m for m in MARKS if m <= args.calls)

    from agentstateprotocol import AgentStateProtocol

    import agentrewind

    print(f"checkpoint() latency in microseconds ({args.calls} calls; median of {WINDOW} "
          "calls ending at each mark)")  # fmt: skip
    print(f"{'':<34} " + "  ".join(f"{'call ' + format(m, ','):>12}" for m in marks))
    asp = AgentStateProtocol("bench")
    print(row("agentstateprotocol 0.1.0 (memory)", measure(
        lambda i: asp.checkpoint(state_for(i), {"confidence": 0.5}, "step", f"s{i}"), args.calls
    ), marks))  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.stores.split(","):
            ns = f"bench-{uuid.uuid4().hex[:8]}"
            if kind == "redis":
                url = f"{args.redis or bench_redis_url()}?namespace={ns}"
            else:
                url = {"memory": f"memory://{ns}", "sqlite": f"sqlite:///{Path(tmp) / 'bench.db'}"}[
                    kind
                ]
            store = agentrewind.connect(url, namespace=ns)
            tl = agentrewind.Timeline("bench", store=store, events=False)
            times = measure(
                lambda i, tl=tl: tl.checkpoint(state_for(i), {"confidence": 0.5}, "step", f"s{i}"),
                args.calls,
            )
            print(row(f"agentrewind Timeline ({kind})", times, marks))
            tl.close()  # frees the timeline's lease, so the run can be deleted
            store.delete_run("bench")
            if kind in args.async_stores.split(","):
                tl = agentrewind.Timeline("bench", store=store, events=False)
                times = ameasure(
                    lambda i, tl=tl: tl.acheckpoint(
                        state_for(i), {"confidence": 0.5}, "step", f"s{i}"
                    ),
                    args.calls,
                )
                print(row(f"agentrewind acheckpoint ({kind})", times, marks))
                tl.close()
                store.delete_run("bench")
            store.close()


if __name__ == "__main__":
    main()
