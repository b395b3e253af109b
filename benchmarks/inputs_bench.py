"""Recording inputs: storage of a 200-turn chat and the record overhead at 200 messages.

Run:  python benchmarks/inputs_bench.py [--turns T] [--calls N] [--rounds R]

1. Storage. A LangChain chat of `--turns` turns (a system message, then each turn a question
   of ~20 words and the model's ~60-word answer appended to the history, every call sending
   the whole history) is recorded on SQLite with `record_inputs=False` (the figures before
   inputs were recorded) and with inputs on (the default). Bytes are the run's encoded records
   (what every store keeps per step). Beside them: the same prompts stored whole on every call
   (what recording inputs naively would cost: quadratic). Goal: inputs on <= 1.5x inputs off.

2. Record overhead. `benchmarks/langchain_bench.py`'s cases (a 1-message call; the same
   199-message history plus a new question), recorded on SQLite with inputs off and on. Each
   round times, back to back, the call outside a run (patched, nothing recorded) and recorded
   with inputs off and on; a round's overhead is the recorded median minus the outside-a-run
   median, and the figure is the median over rounds (a shared machine's load moves between
   rounds; within a round the three are timed back to back).
   Goal: with inputs on, the overhead at 200 messages <= 1.3x the overhead at 1 message.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from langchain_bench import CASES, median_us
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableLambda

from agentrewind import Middleware
from agentrewind_langchain import install
from agentrewind_langchain.testing import ScriptedChatModel

ANSWER = " ".join(f"word{i}" for i in range(60))


def chat_run(mw: Middleware, turns: int) -> tuple[str, list[list[BaseMessage]]]:
    """Record a `turns`-turn chat in a new run; return its id and the prompts sent."""
    model = ScriptedChatModel(responses=[ANSWER])
    run_id = f"chat-{uuid.uuid4().hex[:8]}"
    prompts: list[list[BaseMessage]] = []

    def body(_: Any) -> None:
        history: list[BaseMessage] = [SystemMessage("You answer questions about orders.")]
        for t in range(turns):
            history.append(HumanMessage(f"turn {t}: " + "what is the status of my order " * 3))
            prompts.append(list(history))
            answer = model.invoke(history)
            assert isinstance(answer, AIMessage)
            history.append(answer)

    mw.wrap(RunnableLambda(body)).invoke(None, {"configurable": {"thread_id": run_id}})
    return run_id, prompts


def run_bytes(mw: Middleware, run_id: str) -> int:
    return sum(len(r.encode()) for r in mw.store.load_steps(run_id))


def storage(turns: int) -> None:
    first = second = 0
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'inputs.db'}"
        off_mw, on_mw = Middleware(url, record_inputs=False), Middleware(url)
        off_id, _ = chat_run(off_mw, turns)
        on_id, prompts = chat_run(on_mw, turns)
        off, on = run_bytes(off_mw, off_id), run_bytes(on_mw, on_id)
        sizes = [len(r.encode()) for r in on_mw.store.load_steps(on_id)]
        first, second = sum(sizes[: turns // 2]), sum(sizes[turns // 2 :])
        whole = off + sum(
            len(json.dumps(on_mw.serializer.to_tree(p), separators=(",", ":"))) for p in prompts
        )
        # every prompt is rebuilt from the deltas as it was sent
        from agentrewind.adapters import resolve_inputs

        steps = on_mw.store.load_steps(on_id)
        found = resolve_inputs(steps, on_mw.serializer, on_mw.store.namespace)
        rebuilt = [found[s.step_id]["messages"] for s in steps]
        sent = [on_mw.serializer.to_tree(p) for p in prompts]
        assert rebuilt == sent, "a prompt did not rebuild as it was sent"
        off_mw.close()
        on_mw.close()
    print(f"storage of a {turns}-turn chat on SQLite (encoded records of the run):")
    print(f"  inputs off (before):          {off / 1e3:10.1f} kB")
    print(f"  inputs on (deltas):           {on / 1e3:10.1f} kB   {on / off:.2f}x (goal <= 1.5x: "
          f"{'met' if on <= 1.5 * off else 'MISSED'})")  # fmt: skip
    print(
        f"  prompts stored whole instead: {whole / 1e3:10.1f} kB   {whole / off:.2f}x (quadratic)"
    )
    print(
        f"  inputs on, first half of the turns {first / 1e3:.1f} kB, second half "
        f"{second / 1e3:.1f} kB: {second / first:.2f}x (linear: ~1x; quadratic: ~3x)"
    )


CLOCK = time.perf_counter


def timed(fn: Any, n: int, out: list[float]) -> Any:
    def body(_: Any) -> None:
        for i in range(n):
            t0 = CLOCK()
            fn(i)
            out.append(CLOCK() - t0)

    return body


def plain(fn: Any, n: int) -> list[float]:
    samples: list[float] = []
    RunnableLambda(timed(fn, n, samples)).invoke(None)
    return samples


def in_run(mw: Middleware, fn: Any, n: int) -> list[float]:
    """CPU seconds per call recording `n` calls in a new run (then the run is deleted)."""
    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    record: list[float] = []
    mw.wrap(RunnableLambda(timed(fn, n, record))).invoke(
        None, {"configurable": {"thread_id": run_id}}
    )
    mw.store.delete_run(run_id)
    return record


def overhead(n: int, rounds: int) -> None:
    cases = {k: CASES[k] for k in ("chat model.invoke", "chat, 200 messages")}
    install()
    # per round and case: the call outside a run (patched, nothing recorded) and recorded
    # with inputs off and on, back to back, so a busy machine shifts all three alike
    per_round: dict[str, dict[str, list[float]]] = {name: {} for name in cases}
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'bench.db'}"
        mws = {"inputs off": Middleware(url, record_inputs=False), "inputs on": Middleware(url)}
        for mw in mws.values():
            for fn in cases.values():
                in_run(mw, fn, 50)  # warm up
        for _ in range(rounds):
            for name, fn in cases.items():
                base = median_us(plain(fn, n))
                for label, mw in mws.items():
                    record = in_run(mw, fn, n)
                    per_round[name].setdefault(label, []).append(median_us(record) - base)
        for mw in mws.values():
            mw.close()
    print(f"\nrecord overhead on SQLite, us per call over the same call outside a run (median "
          f"of {rounds} rounds' figures, {n} calls each):")  # fmt: skip
    one, many = per_round["chat model.invoke"], per_round["chat, 200 messages"]
    for label in ("inputs off", "inputs on"):
        a, b = statistics.median(one[label]), statistics.median(many[label])
        verdict = "met" if b <= 1.3 * a else "MISSED"
        print(f"  {label:<10} 1 msg {a:7.1f}, 200 msgs {b:7.1f}: {b / a:.2f}x (goal <= 1.3x: "
              f"{verdict})")  # fmt: skip
    a = statistics.median(x - y for x, y in zip(one["inputs on"], one["inputs off"], strict=True))
    b = statistics.median(x - y for x, y in zip(many["inputs on"], many["inputs off"], strict=True))
    print(f"  recording inputs itself (on minus off, same round): 1 msg {a:+.1f}, 200 msgs "
          f"{b:+.1f} us: it stores the new messages only")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--calls", type=int, default=100, help="calls per round")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    storage(args.turns)
    overhead(args.calls, args.rounds)


if __name__ == "__main__":
    main()
