"""The `upstream-pydantic-ai` plugin wraps what it claims: every agent run a test starts is a
run of `middleware.wrap(agent)` in an agentrewind run, journaled in the test's own SQLite file,
and an agent called from a tool journals into the run of the agent that called it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

UPSTREAM = Path(__file__).resolve().parents[1] / "upstream"
sys.path.insert(0, str(UPSTREAM))
from _harness import run_pytest  # noqa: E402

SUITE = """
import sqlite3

import agentrewind
from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel

seen = []


def test_runs_are_wrapped_and_journaled(tmp_path):
    inner = Agent(TestModel(custom_output_text="inner"), name="inner")
    outer = Agent(TestModel(call_tools=["ask"]), name="outer")

    @outer.tool_plain
    async def ask() -> str:
        seen.append(agentrewind.current_run().run_id)
        return (await inner.run("hi")).output

    assert outer.run_sync("go").output
    assert agentrewind.current_run() is None  # the run closed with the agent run
    journal = tmp_path / "agentrewind-journal.db"
    with sqlite3.connect(journal) as db:
        tables = [t for (t,) in db.execute("select name from sqlite_master where type='table'")]
        rows = sum(db.execute(f'select count(*) from "{t}"').fetchone()[0] for t in tables)
    assert seen and seen[0].startswith("test_runs_are_wrapped_and_journaled-")
    assert rows > 0
"""


def test_the_plugin_runs_every_agent_wrapped_on_a_journal_per_test(tmp_path: Path) -> None:
    (tmp_path / "test_suite.py").write_text(SUITE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["AGENTREWIND_UPSTREAM_STORE"] = "sqlite"
    env["PYTHONPATH"] = os.pathsep.join([str(UPSTREAM), env.get("PYTHONPATH", "")])
    run = run_pytest(
        ["test_suite.py", "-q", "-p", "no:cacheprovider", "-p", "pydantic_ai_upstream_plugin"],
        cwd=tmp_path,
        env=env,
        junit=tmp_path / "out.xml",
        timeout=120,
        python=sys.executable,
    )
    assert not run.fatal, run.log.read_text()
    assert run.tests == {"test_suite::test_runs_are_wrapped_and_journaled": ("passed", "")}, (
        run.log.read_text()
    )
