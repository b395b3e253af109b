"""LangGraph threads are runs like the others (issue 26): a thread whose process died is
`crashed`, one at an interrupt `paused`, in `runs`, `--status`, the viewer's JSON API and
`crashed_runs()`; checkpoints speak LangGraph's words (the node that wrote them, the interrupt
payload, the next nodes) and hide its internal channels unless asked."""

from __future__ import annotations

import operator
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

import agentrewind
from agentrewind.ui import api
from agentrewind_langgraph import RewindSaver
from cli_support import batch, env

CHILD = textwrap.dedent(
    """
    import operator, sys, time
    from pathlib import Path
    from typing import Annotated, TypedDict
    from langgraph.graph import END, START, StateGraph
    from agentrewind_langgraph import RewindSaver

    class State(TypedDict):
        items: Annotated[list[str], operator.add]

    url, thread, flag = sys.argv[1], sys.argv[2], Path(sys.argv[3])

    def wait(state):
        flag.write_text("in b")
        time.sleep(120)  # the test kills the process here
        return {"items": ["b"]}

    b = StateGraph(State)
    b.add_node("a", lambda s: {"items": ["a"]})
    b.add_node("b", wait)
    b.add_edge(START, "a")
    b.add_edge("a", "b")
    b.add_edge("b", END)
    static = thread == "static"
    graph = b.compile(checkpointer=RewindSaver(url), interrupt_before=["b"] if static else None)
    graph.invoke({"items": []}, {"configurable": {"thread_id": thread}})
    """
)


class State(TypedDict):
    items: Annotated[list[str], operator.add]


def _graph(saver: RewindSaver) -> Any:
    def ask(state: State) -> dict[str, Any]:
        return {"items": [f"answer:{interrupt({'question': 'ship it?'})}"]}

    b = StateGraph(State)
    b.add_node("a", lambda s: {"items": ["a"]})
    b.add_node("ask", ask)
    b.add_edge(START, "a")
    b.add_edge("a", "ask")
    b.add_edge("ask", END)
    return b.compile(checkpointer=saver)


def _cfg(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def _statuses(url: str) -> dict[str, str]:
    runs = batch(["runs", "--json", "--store", url])[0].ok().json()
    assert isinstance(runs, list)
    return {r["run_id"]: r["status"] for r in runs}


def test_killed_running_paused_and_interrupted_threads(saver_url: str, tmp_path: Path) -> None:
    url = saver_url
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    flag = tmp_path / "flag"
    # A graph process stopped at a static interrupt and exited normally: paused, not crashed.
    subprocess.run([sys.executable, str(script), url, "static", str(flag)], env=env(),
                   check=True, timeout=60)  # fmt: skip
    # One in the middle of node b: running while it lives, crashed once SIGKILLed.
    child = subprocess.Popen([sys.executable, str(script), url, "killed", str(flag)], env=env())
    try:
        deadline = time.monotonic() + 60
        while not flag.exists():
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        assert _statuses(url)["killed"] == "running"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    with RewindSaver(url) as saver:
        _graph(saver).invoke({"items": []}, _cfg("asking"))
    statuses = _statuses(url)
    assert statuses == {"static": "paused", "killed": "crashed", "asking": "paused"}
    crashed, paused = batch(
        ["runs", "--json", "--status", "crashed", "--store", url],
        ["runs", "--json", "--status", "paused", "--store", url],
    )
    assert [r["run_id"] for r in crashed.ok().json()] == ["killed"]  # type: ignore[union-attr]
    assert {r["run_id"] for r in paused.ok().json()} == {"static", "asking"}  # type: ignore[union-attr]
    with agentrewind.connect(url) as store:
        viewer = {r["run_id"]: r for r in api.list_runs(store)}
        assert {k: r["status"] for k, r in viewer.items()} == statuses
        assert viewer["asking"]["framework"]["interrupts"][0]["value"] == {"question": "ship it?"}
        assert viewer["killed"]["framework"]["next"] == ["b"]
        assert [r.run_id for r in agentrewind.Middleware(store).crashed_runs()] == ["killed"]
    # The crashed thread resumes where it died: node b runs, node a does not run again.
    with RewindSaver(url) as saver:
        b = StateGraph(State)
        ran: list[str] = []
        b.add_node("a", lambda s: ran.append("a") or {"items": ["a"]})
        b.add_node("b", lambda s: ran.append("b") or {"items": ["b"]})
        b.add_edge(START, "a")
        b.add_edge("a", "b")
        b.add_edge("b", END)
        out = b.compile(checkpointer=saver).invoke(None, _cfg("killed"))
    assert out["items"] == ["a", "b"] and ran == ["b"]
    assert _statuses(url)["killed"] == "completed"


def test_checkpoints_in_langgraphs_words(saver_url: str) -> None:
    url = saver_url
    with RewindSaver(url) as saver:
        graph = _graph(saver)
        graph.invoke({"items": []}, _cfg("t"))
        early = list(saver.list(_cfg("t")))[-2]  # `__start__`'s checkpoint: fork from it
        graph.update_state(early.config, {"items": ["edited"]})
    log, show, show_all, branches, tree = batch(
        ["log", "t", "--json", "--store", url],
        ["show", "t", "2", "--json", "--store", url],
        ["show", "t", "2", "--all", "--json", "--store", url],
        ["branches", "t", "--json", "--store", url],
        ["tree", "t", "--json", "--store", url],
    )
    steps = log.ok().json()
    assert isinstance(steps, list)
    assert [s["meta"]["node"] for s in steps] == [["input"], ["__start__"], ["a"], ["update_state"]]
    assert [s["name"] for s in steps[:3]] == ["input (step -1)", "__start__ (step 0)", "a (step 1)"]
    # `a`'s checkpoint: `ask` is due, and stopped at its interrupt with the payload.
    assert steps[2]["meta"]["next"] == ["ask"]
    assert steps[2]["meta"]["interrupts"][0]["value"] == {"question": "ship it?"}
    shown, everything = show.ok().json(), show_all.ok().json()
    assert isinstance(shown, dict) and isinstance(everything, dict)
    assert shown["output"] == {"items": ["a"]}
    assert "branch:to:ask" in everything["output"]
    # `branches` names the leaves `tree` draws: the edit forked the thread.
    heads = {b["name"]: b["head"] for b in branches.ok().json()}  # type: ignore[union-attr]
    assert set(heads) == {"main", "branch-1"} and heads["main"] == steps[-1]["step_id"]
    nodes = tree.ok().json()
    assert isinstance(nodes, list)
    children: dict[str, int] = {}
    for n in nodes:
        children[n["parent_id"]] = children.get(n["parent_id"], 0) + 1
    leaves = {n["id"] for n in nodes if n["id"] not in children}
    assert leaves == set(heads.values())
    assert {n["id"]: n["refs"] for n in nodes if n["refs"]} == {h: [b] for b, h in heads.items()}
