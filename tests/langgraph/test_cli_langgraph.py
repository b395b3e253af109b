"""LangGraph threads are first-class in every CLI command (issue 16, finding 2), and the CLI
imports no framework unless a store holds LangGraph threads (issue 14, start-up)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path
from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

import agentrewind
from agentrewind_langgraph import RewindSaver
from cli_support import batch, env
from langgraph_support import State, ask_graph, cfg


def _graph(saver: RewindSaver) -> Any:
    return ask_graph().compile(checkpointer=saver)


def test_a_thread_whose_node_raised_is_failed_with_its_error(saver_url: str) -> None:
    def boom(state: State) -> dict[str, Any]:
        if state["items"] == ["a"]:
            raise TimeoutError("LLM timed out on A-17")
        return {"items": ["b"]}

    b = StateGraph(State)
    b.add_node("a", lambda s: {"items": ["a"]})
    b.add_node("boom", boom)
    b.add_edge(START, "a")
    b.add_edge("a", "boom")
    b.add_edge("boom", END)
    with RewindSaver(saver_url) as saver:
        graph = b.compile(checkpointer=saver)
        with contextlib.suppress(TimeoutError):
            graph.invoke({"items": []}, cfg("broken"))
        graph.invoke({"items": ["x"]}, cfg("fine"))
    runs, failed = batch(
        ["runs", "--json", "--store", saver_url],
        ["runs", "--json", "--status", "failed", "--store", saver_url],
    )
    listed = {r["run_id"]: r for r in runs.ok().json()}  # type: ignore[union-attr]
    assert listed["broken"]["status"] == "failed" and listed["fine"]["status"] == "completed"
    assert [r["run_id"] for r in failed.ok().json()] == ["broken"]  # type: ignore[union-attr]


def test_threads_in_every_command(saver_url: str, tmp_path: Path) -> None:
    with RewindSaver(saver_url) as saver:
        graph = _graph(saver)
        graph.invoke({"items": []}, cfg("t1"))
        graph.invoke(Command(resume="yes"), cfg("t1"))
        graph.invoke({"items": []}, cfg("t2"))
        first = list(saver.list(cfg("t1")))[-2]  # an early checkpoint: branch from it
        graph.update_state(first.config, {"items": ["edited"]})
        n_t1 = len(list(saver.list(cfg("t1"))))
    url = saver_url
    runs, metrics, log, tree, export = batch(
        ["runs", "--json", "--store", url],
        ["metrics", "t1", "--json", "--store", url],
        ["log", "t1", "--json", "--store", url],
        ["tree", "t1", "--json", "--store", url],
        ["export", "t1", "--store", url],
    )
    listed = {r["run_id"]: r for r in runs.ok().json()}  # type: ignore[union-attr]
    assert listed["t1"]["kind"] == "langgraph" and listed["t1"]["steps"] == n_t1
    # t1's newest checkpoint is the update_state fork, with its nodes still to run: paused.
    assert listed["t2"]["status"] == "paused" and listed["t1"]["status"] == "paused"
    assert listed["t1"]["created_at"].startswith("20") and listed["t1"]["updated_at"].endswith("Z")
    assert metrics.ok().json()["steps"] == n_t1  # type: ignore[index]
    nodes = tree.ok().json()
    assert isinstance(nodes, list)
    parents = [n["parent_id"] for n in nodes if n["parent_id"]]
    assert len(parents) != len(set(parents))  # the update_state branch: one node, two children
    doc = export.ok().json()
    assert isinstance(doc, dict) and doc["run_id"] == "t1" and len(doc["steps"]) == n_t1
    assert doc["state"]["items"] == ["edited"]  # the newest checkpoint: the branch
    steps = log.ok().json()
    assert isinstance(steps, list) and len({s["ref"] for s in steps}) == n_t1
    commands = []
    for i, s in enumerate(steps):
        for j, name in enumerate((str(s["seq"]), s["ref"])):
            commands.append(["show", "t1", name, "--json", "--store", url])
            commands.append(["fork", "t1", "--at", name, "--to", f"t1-{i}-{j}", "--json",
                             "--store", url])  # fmt: skip
    results = batch(*commands)
    for k, s in enumerate(steps):
        for n in (0, 2):
            shown, forked = (
                results[2 * k * 2 + n].ok().json(),
                results[2 * k * 2 + n + 1].ok().json(),
            )
            assert isinstance(shown, dict) and isinstance(forked, dict)
            assert shown["step_id"] == s["step_id"] and forked["at"] == s["step_id"]
            assert isinstance(shown["output"], dict)
    # A fork of the paused thread resumes on its own; the original is untouched.
    t2_steps = batch(["log", "t2", "--json", "--store", url])[0].ok().json()
    assert isinstance(t2_steps, list)
    fork, rm, after = batch(
        ["fork", "t2", "--at", str(t2_steps[-1]["seq"]), "--to", "t2-copy", "--store", url],
        ["rm", "t2", "--yes", "--json", "--store", url],
        ["runs", "--kind", "langgraph", "--json", "--limit", "1000", "--store", url],
    )
    assert f"({len(t2_steps)} step(s) copied)" in fork.ok().out
    assert rm.ok().json()["delete"] == ["t2"]  # type: ignore[index]
    left = {r["run_id"] for r in after.ok().json()}  # type: ignore[union-attr]
    assert "t2" not in left and "t2-copy" in left
    with RewindSaver(url) as saver:
        out = _graph(saver).invoke(Command(resume="later"), cfg("t2-copy"))
        assert out["items"] == ["a", "answer:later"]


FRAMEWORKS = ("langgraph", "langchain", "langchain_core", "llama_index")


def _imported(args: list[str], cwd: Path) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "agentrewind", *args],
        capture_output=True, text=True, timeout=60, env=env(), cwd=cwd,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    names = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line}
    return {n for n in names if n.split(".")[0] in FRAMEWORKS}


def test_help_and_runs_import_no_framework(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'plain.db'}"
    with agentrewind.connect(url) as store:
        mw = agentrewind.Middleware(store)
        with mw.run("job") as run:
            run.step("fetch", lambda: 1)
    assert _imported(["--help"], tmp_path) == set()
    assert _imported(["--store", url, "runs"], tmp_path) == set()
    assert _imported(["runs", "--store", url, "--json"], tmp_path) == set()
    # The plugin command still works, loaded when named.
    out = batch(["migrate-sqlite-saver", "--help"])[0]
    assert out.code == 0 and "SqliteSaver" in out.out
