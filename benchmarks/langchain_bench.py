"""Per-call cost of the LangChain adapter, beside the unwrapped call (DESIGN.md §8).

Run:  python benchmarks/langchain_bench.py [--calls N] [--rounds R] [--redis URL]

For a fake chat model's `invoke` and a tool's `invoke` it prints the median microseconds per
call, each call timed on its own inside a `RunnableLambda`:

* unwrapped: before any patch is installed;
* outside a run: patched, in a runnable that is not wrapped;
* record / replay: in a wrapped runnable, on a new run (every call recorded) and on the
  same run again (every call replayed), on SQLite (NORMAL) and on Redis.

"overhead" is the median minus the unwrapped median: what the middleware adds per call.
Goal for recording: <= 200 us on SQLite and <= 300 us on Redis. A chat call writes one
record; a tool call writes two (`started` before it runs, `completed` after), as the core's
"step record" in benchmarks/core_bench.py does; the core journal's own cost for 1 and 2
writes is timed in the same run (interleaved) and subtracted to show the adapter's share.
Medians are taken over all calls of `--rounds` rounds, so a busy machine's stalls do not
decide the figure.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _bench_redis import bench_redis_url
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool

from agentrewind_langchain import Middleware, install
from agentrewind_langchain.testing import ScriptedChatModel

GOALS = {"sqlite": 200.0, "redis": 300.0}


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


MODEL = ScriptedChatModel(responses=["a short answer"])


def chat_call(i: int) -> Any:
    return MODEL.invoke(f"question {i}")


def tool_call(i: int) -> Any:
    return add.invoke({"a": i, "b": 1})


HISTORY = [
    HumanMessage(f"question {i}: " + "words " * 30) if i % 2 == 0 else AIMessage("an answer " * 30)
    for i in range(199)
]


def chat_with_history(i: int) -> Any:
    """An agent's turn: the same 199-message history plus one new question (200 messages)."""
    return MODEL.invoke([*HISTORY, HumanMessage(f"question {i}")])


CASES: dict[str, Callable[[int], Any]] = {
    "chat model.invoke": chat_call,
    "chat, 200 messages": chat_with_history,
    "tool.invoke": tool_call,
}


def timed_body(fn: Callable[[int], Any], n: int, out: list[float]) -> Callable[[Any], None]:
    """A runnable body that makes `n` calls and appends each call's seconds to `out`."""

    def body(_: Any) -> None:
        clock = time.perf_counter
        for i in range(n):
            t0 = clock()
            fn(i)
            out.append(clock() - t0)

    return body


def plain(fn: Callable[[int], Any], n: int) -> list[float]:
    """Per-call seconds of `n` calls inside a runnable that is not wrapped."""
    samples: list[float] = []
    RunnableLambda(timed_body(fn, n, samples)).invoke(None)
    return samples


def in_run(mw: Middleware, fn: Callable[[int], Any], n: int) -> tuple[list[float], list[float]]:
    """Per-call seconds recording `n` calls in a new run, then replaying them."""
    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    record: list[float] = []
    replay: list[float] = []
    cfg = {"configurable": {"thread_id": run_id}}
    mw.wrap(RunnableLambda(timed_body(fn, n, record))).invoke(None, cfg)
    mw.wrap(RunnableLambda(timed_body(fn, n, replay))).invoke(None, cfg)
    assert mw.metrics(run_id).replay_hits == n, "the second pass must replay every call"
    mw.store.delete_run(run_id)
    return record, replay


def _noop(i: int) -> int:
    return i


def core_run(mw: Middleware, n: int) -> tuple[list[float], list[float]]:
    """Per-call seconds of the core journal alone: a 1-write call and a 2-write step."""
    call = mw.step("call", side_effects=False)(_noop)
    one: list[float] = []
    two: list[float] = []
    clock = time.perf_counter
    run_id = f"core-{uuid.uuid4().hex[:8]}"
    with mw.run(run_id) as run:
        for i in range(n):
            t0 = clock()
            call(i)
            t1 = clock()
            run.step("work", _noop, i)
            two.append(clock() - t1)
            one.append(t1 - t0)
    mw.store.delete_run(run_id)
    return one, two


def median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--calls", type=int, default=300, help="calls per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--redis", default=None, help="default: a redis-server of its own")
    args = parser.parse_args()
    n, rounds = args.calls, args.rounds

    samples: dict[str, dict[str, list[float]]] = {name: {} for name in CASES}
    for name, fn in CASES.items():
        plain(fn, 50)  # warm up
        samples[name]["unwrapped"] = [s for _ in range(rounds) for s in plain(fn, n)]
    install()
    for name, fn in CASES.items():
        samples[name]["outside a run"] = [s for _ in range(rounds) for s in plain(fn, n)]

    core: dict[str, dict[str, list[float]]] = {
        label: {"1 write": [], "2 writes": []} for label in GOALS
    }
    with tempfile.TemporaryDirectory() as tmp:
        stores = {
            "sqlite": lambda: f"sqlite:///{Path(tmp) / 'bench.db'}",
            "redis": lambda: (
                f"{args.redis or bench_redis_url()}?namespace=bench-{uuid.uuid4().hex[:4]}"
            ),
        }
        for label, url_of in stores.items():
            try:
                mw = Middleware(url_of())
                mw.store.list_runs(limit=1)
            except Exception as exc:  # no Redis here: say so and go on
                print(f"{label}: skipped ({exc})")
                continue
            for fn in CASES.values():
                in_run(mw, fn, 50)  # warm up
            core_run(mw, 50)
            for _ in range(rounds):  # interleaved, so every figure sees the same machine
                for name, fn in CASES.items():
                    record, replay = in_run(mw, fn, n)
                    samples[name].setdefault(f"{label} record", []).extend(record)
                    samples[name].setdefault(f"{label} replay", []).extend(replay)
                one, two = core_run(mw, n)
                core[label]["1 write"].extend(one)
                core[label]["2 writes"].extend(two)
            mw.close()

    rows = {name: {k: median_us(v) for k, v in row.items()} for name, row in samples.items()}
    print(f"\nmedian us per call ({n} calls x {rounds} rounds, each call timed)\n")
    columns = list(next(iter(rows.values())).keys())
    print(f"{'':<20}" + "".join(f"{c:>16}" for c in columns))
    for name, row in rows.items():
        print(f"{name:<20}" + "".join(f"{row.get(c, float('nan')):>16.1f}" for c in columns))
    print("\noverhead over the unwrapped call (us):")
    for name, row in rows.items():
        base = row["unwrapped"]
        parts = [f"outside a run {row['outside a run'] - base:+.1f}"]
        for label, goal in GOALS.items():
            if f"{label} record" in row:
                cost = row[f"{label} record"] - base
                verdict = "met" if cost <= goal else "MISSED"
                parts.append(f"{label} record {cost:+.1f} (goal <= {goal:.0f}: {verdict})")
                parts.append(f"{label} replay {row[f'{label} replay'] - base:+.1f}")
        print(f"  {name:<18} " + ", ".join(parts))
    print("\nthe core journal alone in the same run (benchmarks/core_bench.py's workload, us):")
    writes = {
        "chat model.invoke": "1 write",
        "chat, 200 messages": "1 write",
        "tool.invoke": "2 writes",
    }
    for label in GOALS:
        if not core[label]["1 write"]:
            continue
        one, two = (median_us(core[label][k]) for k in ("1 write", "2 writes"))
        print(f"  {label:<7} call record (1 write) {one:.1f}, step record (2 writes) {two:.1f}")
        for name, row in rows.items():
            if f"{label} record" in row:
                own = median_us(core[label][writes[name]])
                adapter = row[f"{label} record"] - row["unwrapped"] - own
                print(f"    {name:<18} adapter's share of the record overhead {adapter:+.1f}")
    print("\nhistory length (goal: record overhead at 200 messages <= 1.3x at 1; replay <= 50 us):")
    short, long = rows["chat model.invoke"], rows["chat, 200 messages"]
    for label in GOALS:
        if f"{label} record" not in long:
            continue
        one = short[f"{label} record"] - short["unwrapped"]
        many = long[f"{label} record"] - long["unwrapped"]
        print(
            f"  {label:<7} record overhead 1 msg {one:.1f}, 200 msgs {many:.1f}: "
            f"{many / one:.2f}x; replay 1 msg {short[f'{label} replay']:.1f} us, "
            f"200 msgs {long[f'{label} replay']:.1f} us"
        )


if __name__ == "__main__":
    main()
