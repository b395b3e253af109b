"""Migration from SqliteSaver, the CLI command, the run source, four writer processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

from agentrewind_langgraph import RewindSaver, migrate_sqlite_saver
from agentrewind_langgraph.runs import run_source
from langgraph_support import ask_graph


def _fill_sqlite_saver(path: Path) -> None:
    with SqliteSaver.from_conn_string(str(path)) as old:
        graph = ask_graph().compile(checkpointer=old)
        graph.invoke({"items": []}, {"configurable": {"thread_id": "done"}})
        graph.invoke(Command(resume="yes"), {"configurable": {"thread_id": "done"}})
        graph.invoke({"items": []}, {"configurable": {"thread_id": "paused"}})


def test_migrate_sqlite_saver_keeps_history_and_pending_interrupt(
    saver_url: str, tmp_path: Path
) -> None:
    src = tmp_path / "old.sqlite"
    _fill_sqlite_saver(src)
    with SqliteSaver.from_conn_string(str(src)) as old:
        old_hist = {
            t: [(c.config, c.metadata, c.checkpoint["channel_values"], c.parent_config)
                for c in old.list({"configurable": {"thread_id": t}})]
            for t in ("done", "paused")
        }  # fmt: skip
    counts = migrate_sqlite_saver(src, saver_url)
    assert counts["threads"] == 2 and counts["checkpoints"] == sum(map(len, old_hist.values()))
    assert counts["writes"] > 0
    with RewindSaver(saver_url) as saver:
        for t, hist in old_hist.items():
            new = [(c.config, c.metadata, c.checkpoint["channel_values"], c.parent_config)
                   for c in saver.list({"configurable": {"thread_id": t}})]  # fmt: skip
            assert new == hist
        graph = ask_graph().compile(checkpointer=saver)
        out = graph.invoke(Command(resume="later"), {"configurable": {"thread_id": "paused"}})
        assert out["items"] == ["a", "answer:later"]


def test_cli_migrates_and_lists_threads(tmp_path: Path) -> None:
    src = tmp_path / "old.sqlite"
    _fill_sqlite_saver(src)
    url = f"sqlite:///{tmp_path / 'new.db'}"
    cli = [sys.executable, "-m", "agentrewind.cli", "--store", url]
    done = subprocess.run([*cli, "migrate-sqlite-saver", str(src)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "copied 2 thread(s)" in done.stdout
    bad = subprocess.run(
        [*cli, "migrate-sqlite-saver", str(tmp_path / "nope.db")], capture_output=True, text=True
    )
    assert bad.returncode == 3 and "no SqliteSaver database" in bad.stderr
    import agentrewind

    with agentrewind.connect(url) as store:
        runs = run_source.list_runs(store, limit=10)
        assert {r.run_id for r in runs} == {"done", "paused"}
        steps = run_source.load_steps(store, "done")
        assert steps is not None and len(steps) >= 4
        ids = {s.step_id for s in steps}
        assert steps[0].parent_id is None
        assert all(s.parent_id in ids for s in steps[1:])
        assert all(s.kind == "checkpoint" for s in steps)
        assert run_source.load_steps(store, "missing") is None


def test_four_processes_write_one_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    RewindSaver(url).close()  # create the tables once
    script = textwrap.dedent(
        f"""
        import operator, sys
        from typing import Annotated, TypedDict
        from langgraph.graph import END, START, StateGraph
        from agentrewind_langgraph import RewindSaver

        class S(TypedDict):
            items: Annotated[list, operator.add]

        b = StateGraph(S)
        prev = START
        for i in range(5):
            b.add_node(f"n{{i}}", lambda s, i=i: {{"items": [i]}})
            b.add_edge(prev, f"n{{i}}")
            prev = f"n{{i}}"
        b.add_edge(prev, END)
        with RewindSaver({url!r}) as saver:
            g = b.compile(checkpointer=saver)
            for k in range(25):
                cfg = {{"configurable": {{"thread_id": f"p{{sys.argv[1]}}-{{k}}"}}}}
                out = g.invoke({{"items": []}}, cfg, durability="sync")
                assert out["items"] == [0, 1, 2, 3, 4]
        print("ok")
        """
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], [r[1][-500:] for r in results]
    with RewindSaver(url) as saver:
        threads = saver.backend.thread_ids()
        assert len(threads) == 100
        tup = saver.get_tuple({"configurable": {"thread_id": "p3-24"}})
        assert tup is not None and tup.checkpoint["channel_values"]["items"] == [0, 1, 2, 3, 4]
        assert len(list(saver.list({"configurable": {"thread_id": "p0-0"}}))) == 7
