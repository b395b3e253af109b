"""Child processes of the chaos suite (run as `python _chaos_worker.py MODE ...`).

Every mode prints `ready` once it holds its run, then `done` when it finished, or
`lost <ErrorClass>` (exit code 3) when the store fenced it off. Side effects are appended to
EFFECTS as `index pid` lines (one `write` + `fsync`), so they survive a SIGKILL.

Modes:
    journal URL RUN_ID EFFECTS STEPS LEASE_TTL DELAY
        A core journal run of STEPS steps; each returns `{"i": i, "pid": pid}`.
    timeline URL NAME COUNT LEASE_TTL DELAY HOLD
        COUNT checkpoints `{"n": n, "pid": pid}`; with HOLD=1, then waits for a line on stdin
        before closing (so it keeps the lease while the parent checks a stale writer).
    graph URL THREAD EFFECTS NODES LEASE_TTL DELAY
        A LangGraph line graph of NODES nodes on `RewindSaver(lease=True)`, resumed from its
        last checkpoint when the thread has one.
"""

from __future__ import annotations

import operator
import os
import sys
import time
from typing import Annotated, Any, TypedDict

import agentrewind

# (looked up by name, so the suite also runs against a core without DataLostError)
FENCED = tuple(
    getattr(agentrewind, n) for n in ("RunLockedError", "DataLostError") if hasattr(agentrewind, n)
)


class State(TypedDict):
    items: Annotated[list[str], operator.add]


def effect(path: str, i: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{i} {os.getpid()}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def say(text: str) -> None:
    print(text, flush=True)


def journal(url: str, run_id: str, effects: str, steps: int, ttl: float, delay: float) -> None:
    def work(i: int) -> dict[str, int]:
        time.sleep(delay)
        effect(effects, i)
        return {"i": i, "pid": os.getpid()}

    mw = agentrewind.Middleware(url, lease_ttl=ttl)
    with mw.run(run_id) as run:
        say("ready")
        for i in range(steps):
            run.step("work", work, i)
    mw.close()


def timeline(url: str, name: str, count: int, ttl: float, delay: float, hold: bool) -> None:
    store = agentrewind.connect(url)
    tl = agentrewind.Timeline(name, store=store, lease_ttl=ttl)
    say("ready")
    for n in range(count):
        tl.checkpoint({"n": n, "pid": os.getpid()}, description=f"{os.getpid()}")
        time.sleep(delay)
    if hold:
        say("written")
        sys.stdin.readline()
    tl.close()
    store.close()


def graph(url: str, thread: str, effects: str, nodes: int, ttl: float, delay: float) -> None:
    from langgraph.graph import END, START, StateGraph

    from agentrewind_langgraph import RewindSaver

    def node(i: int) -> Any:
        def run(state: State) -> dict[str, list[str]]:
            time.sleep(delay)
            effect(effects, i)
            return {"items": [f"{i}:{os.getpid()}"]}

        return run

    b = StateGraph(State)
    prev = START
    for i in range(nodes):
        b.add_node(f"n{i}", node(i))
        b.add_edge(prev, f"n{i}")
        prev = f"n{i}"
    b.add_edge(prev, END)
    cfg: Any = {"configurable": {"thread_id": thread}}
    with RewindSaver(url, lease=True, lease_ttl=ttl) as saver:
        g = b.compile(checkpointer=saver)
        fresh = saver.get_tuple(cfg) is None
        say("ready")
        g.invoke({"items": []} if fresh else None, cfg, durability="sync")


def main() -> None:
    mode, *args = sys.argv[1:]
    try:
        if mode == "journal":
            journal(args[0], args[1], args[2], int(args[3]), float(args[4]), float(args[5]))
        elif mode == "timeline":
            timeline(
                args[0], args[1], int(args[2]), float(args[3]), float(args[4]), args[5:] == ["1"]
            )
        elif mode == "graph":
            graph(args[0], args[1], args[2], int(args[3]), float(args[4]), float(args[5]))
        else:
            raise SystemExit(f"unknown mode {mode!r}")
    except FENCED as exc:
        say(f"lost {type(exc).__name__}")
        sys.exit(3)
    say("done")


if __name__ == "__main__":
    main()
