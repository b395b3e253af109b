"""LangGraph threads are runs like the others (issue 26): a thread whose process died is
`crashed`, one at an interrupt `paused`, in `runs`, `--status`, the viewer's JSON API and
`crashed_runs()`; checkpoints speak LangGraph's words (the node that wrote them, the interrupt
payload, the next nodes) and hide its internal channels unless asked."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

import agentrewind
from agentrewind.ui import api
from agentrewind_langgraph import RewindSaver
from cli_support import batch, env
from langgraph_support import State, ask_graph, cfg

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


def _graph(saver: RewindSaver) -> Any:
    return ask_graph({"question": "ship it?"}).compile(checkpointer=saver)


def test_killed_running_paused_and_interrupted_threads(saver_url: str, tmp_path: Path) -> None:
    url = saver_url
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    flag = tmp_path / "flag"

    def child(thread: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, str(script), url, thread, str(flag)], env=env())

    # One graph process stops at a static interrupt and exits normally: paused, not crashed.
    # The other is in the middle of node b: running while it lives, crashed once SIGKILLed.
    static, killed = child("static"), child("killed")
    try:
        assert static.wait(timeout=120) == 0
        deadline = time.monotonic() + 120
        while not flag.exists():
            assert killed.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        alive = batch(["runs", "--json", "--store", url])[0].ok().json()
        assert {r["run_id"]: r["status"] for r in alive} == {  # type: ignore[union-attr]
            "static": "paused", "killed": "running"
        }  # fmt: skip
    finally:
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(timeout=30)
    with RewindSaver(url) as saver:
        _graph(saver).invoke({"items": []}, cfg("asking"))
    runs, crashed, paused = batch(
        ["runs", "--json", "--store", url],
        ["runs", "--json", "--status", "crashed", "--store", url],
        ["runs", "--json", "--status", "paused", "--store", url],
    )
    statuses = {r["run_id"]: r["status"] for r in runs.ok().json()}  # type: ignore[union-attr]
    assert statuses == {"static": "paused", "killed": "crashed", "asking": "paused"}
    assert [r["run_id"] for r in crashed.ok().json()] == ["killed"]  # type: ignore[union-attr]
    assert {r["run_id"] for r in paused.ok().json()} == {"static", "asking"}  # type: ignore[union-attr]
    with agentrewind.connect(url) as store:
        viewer = {r["run_id"]: r for r in api.list_runs(store)}
        assert {k: r["status"] for k, r in viewer.items()} == statuses
        assert viewer["asking"]["framework"]["interrupts"][0]["value"] == {"question": "ship it?"}
        assert viewer["killed"]["framework"]["next"] == ["b"]
        assert [r.run_id for r in agentrewind.Middleware(store).crashed_runs()] == ["killed"]
    # The crashed thread resumes where it died: node b runs, node a does not run again.
    ran: list[str] = []
    b = StateGraph(State)
    b.add_node("a", lambda s: ran.append("a") or {"items": ["a"]})
    b.add_node("b", lambda s: ran.append("b") or {"items": ["b"]})
    b.add_edge(START, "a")
    b.add_edge("a", "b")
    b.add_edge("b", END)
    with RewindSaver(url) as saver:
        out = b.compile(checkpointer=saver).invoke(None, cfg("killed"))
    assert out["items"] == ["a", "b"] and ran == ["b"]
    with agentrewind.connect(url) as store:
        assert {r["run_id"]: r["status"] for r in api.list_runs(store)}["killed"] == "completed"


def test_a_thread_written_through_the_async_api_reads_crashed_when_killed(
    saver_url: str, tmp_path: Path
) -> None:
    script = tmp_path / "child.py"
    script.write_text(
        CHILD.replace(
            'graph.invoke({"items": []}, {"configurable": {"thread_id": thread}})',
            "import asyncio\n"
            'asyncio.run(graph.ainvoke({"items": []}, {"configurable": {"thread_id": thread}}))',
        )
    )
    assert "ainvoke" in script.read_text()
    flag = tmp_path / "flag"
    proc = subprocess.Popen([sys.executable, str(script), saver_url, "async-killed", str(flag)])
    try:
        deadline = time.monotonic() + 120
        while not flag.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        listed = batch(["runs", "--json", "--store", saver_url])[0].ok().json()
        assert [(r["run_id"], r["status"]) for r in listed] == [("async-killed", "running")]  # type: ignore[union-attr]
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    crashed = batch(["runs", "--json", "--status", "crashed", "--store", saver_url])[0]
    assert [r["run_id"] for r in crashed.ok().json()] == ["async-killed"]  # type: ignore[union-attr]


async def test_the_async_api_marks_on_the_loop_and_removes_its_marks_at_aclose(
    saver_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentrewind_langgraph import _writers

    monkeypatch.setattr(_writers, "BEAT_TTL", 0.6)
    b = StateGraph(State)
    b.add_node("a", lambda s: {"items": ["a"]})
    b.add_node("b", lambda s: {"items": ["b"]})
    b.add_edge(START, "a")
    b.add_edge("a", "b")
    b.add_edge("b", END)
    async with RewindSaver(saver_url) as saver:
        graph = b.compile(checkpointer=saver, interrupt_before=["b"])
        await graph.ainvoke({"items": []}, cfg("stopped"))
        marks = saver._writers
        assert marks is not None and not marks._workers  # no thread was started
        await asyncio.sleep(1.5)  # its heartbeat outlives two of its lives: the task renews it
        assert _writers.writer_of(saver.store, _writers.beat_name("stopped")) == marks.owner
        assert _writers.thread_writer(saver.store, "stopped") == (marks.owner, True)
    with agentrewind.connect(saver_url) as store:
        assert _writers.thread_writer(store, "stopped") == ("", False)  # stopped on purpose
    listed = batch(["runs", "--json", "--store", saver_url])[0].ok().json()
    assert [(r["run_id"], r["status"]) for r in listed] == [("stopped", "paused")]  # type: ignore[union-attr]


def test_a_writer_on_another_host_reads_crashed_once_its_heartbeat_lapses(
    saver_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentrewind_langgraph import _writers

    script = tmp_path / "child.py"
    script.write_text(CHILD)
    # A thread stopped at a static interrupt by a process that exited: no mark, paused.
    proc = subprocess.Popen([sys.executable, str(script), saver_url, "static", str(tmp_path)])
    assert proc.wait(timeout=120) == 0

    def status() -> str:
        listed = batch(["runs", "--json", "--store", saver_url])[0].ok().json()
        return {r["run_id"]: r["status"] for r in listed}["static"]  # type: ignore[union-attr]

    assert status() == "paused"
    # A writer on another host (its pid cannot be checked here) marks it: its heartbeat alone
    # says whether it lives.
    other = "elsewhere.example:4242:0badcafe"
    with agentrewind.connect(saver_url) as store:
        store.acquire_lease(_writers.mark_name("static"), other, _writers.MARK_TTL)
        store.acquire_lease(_writers.beat_name("static"), other, 1.0)
        assert status() == "running"
        time.sleep(1.2)  # its heartbeat lapses: the writer is gone
        assert status() == "crashed"
    # A process that writes the thread again takes the dead writer's mark over, and its marks'
    # thread renews its heartbeat while it holds the mark.
    monkeypatch.setattr(_writers, "BEAT_TTL", 0.6)
    with agentrewind.connect(saver_url) as store:
        marks = _writers.WriterMarks(store)
        marks.mark("static")
        time.sleep(1.5)  # more than two heartbeats' lives
        assert _writers.thread_writer(store, "static") == (marks.owner, True)
        assert status() == "running"
        marks.close()
        assert _writers.thread_writer(store, "static") == ("", False)
    assert status() == "paused"


def test_checkpoints_in_langgraphs_words(saver_url: str) -> None:
    url = saver_url
    with RewindSaver(url) as saver:
        graph = _graph(saver)
        graph.invoke({"items": []}, cfg("t"))
        early = list(saver.list(cfg("t")))[-2]  # `__start__`'s checkpoint: fork from it
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


NO_ADAPTER = """
import json, sys
import agentrewind.plugins as plugins
declared = plugins.declared
plugins.declared = lambda group: tuple(
    e for e in declared(group) if not e.value.startswith("agentrewind_langgraph"))
from cli_support import DRIVER
exec(DRIVER)
"""


@pytest.mark.postgres
def test_export_import_across_backends_resumes_and_without_the_adapter(
    tmp_path: Path, redis_url: str, postgres_url: str
) -> None:
    src = f"sqlite:///{tmp_path / 'src.db'}"
    with RewindSaver(src) as saver:
        _graph(saver).invoke({"items": []}, cfg("order-7"))
    doc = tmp_path / "order-7.json"
    ns = f"imp-{uuid.uuid4().hex[:8]}"
    targets = [f"{redis_url}?namespace={ns}", f"{postgres_url}?namespace={ns}"]
    results = batch(
        ["export", "order-7", "-o", str(doc), "--store", src],
        *(["import", str(doc), "--store", t] for t in targets),
        *(["import", str(doc), "--store", t] for t in targets),  # again: refused
        *(["import", str(doc), "--replace", "--store", t] for t in targets),
        *(["runs", "--json", "--store", t] for t in targets),
    )
    results[0].ok()
    for done in results[1:3]:
        assert "imported langgraph run order-7 (3 checkpoint(s))" in done.ok().out
    for again in results[3:5]:
        assert again.code == 1 and "already exists" in again.err
    for replaced in results[5:7]:  # over a deleted thread's tombstone, too
        assert "imported langgraph run order-7 (3 checkpoint(s))" in replaced.ok().out
    for listed in results[7:]:
        runs = listed.ok().json()
        assert [(r["run_id"], r["kind"], r["status"]) for r in runs] == [  # type: ignore[union-attr]
            ("order-7", "langgraph", "paused")  # one run: the thread, no journal twin
        ]
    for t in targets:  # RewindSaver reads it there and resumes at the interrupt
        with RewindSaver(t) as saver:
            out = (
                ask_graph({"question": "ship it?"})
                .compile(checkpointer=saver)
                .invoke(Command(resume="yes"), cfg("order-7"))
            )
            assert out["items"] == ["a", "answer:yes"]
    # Where the adapter is not installed: counted, named, refused, never "no run".
    done = subprocess.run(
        [sys.executable, "-c", NO_ADAPTER, json.dumps([
            ["runs", "--store", src], ["log", "order-7", "--store", src],
            ["import", str(doc), "--store", f"sqlite:///{tmp_path / 'other.db'}"],
        ])],
        capture_output=True, text=True, timeout=120, env=env(), cwd=Path(__file__).parents[1],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (runs_code, _, runs_err), (log_code, _, log_err), (imp_code, _, imp_err) = json.loads(
        done.stdout
    )
    install = 'pip install "agentrewind[langgraph]"'
    assert runs_code == 0 and f"1 LangGraph thread(s) not shown here: run `{install}`" in runs_err
    assert log_code == 1 and "'order-7' is a LangGraph thread" in log_err and install in log_err
    assert "no run" not in log_err
    assert imp_code == 1 and "holds a LangGraph thread" in imp_err and install in imp_err
    assert (
        not (tmp_path / "other.db").exists()
        or "order-7"
        not in batch(["runs", "--json", "--store", f"sqlite:///{tmp_path / 'other.db'}"])[0].out
    )
