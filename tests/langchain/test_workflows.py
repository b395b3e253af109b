"""A LangChain agent and a LangGraph graph registered as workflows (issue 24): SIGKILLed in
one process, recovered by `recover()` in another with no model or tool call paid twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

HERE = Path(__file__).parent


def attempt(url: str, run_id: str, mode: str, kind: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, str(HERE / "_agent_workflow.py"), url, run_id, mode, kind],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip


def test_an_agent_workflow_killed_in_a_tool_is_recovered_in_a_new_process(
    durable_url: str,
) -> None:
    run_id = f"wf-{uuid.uuid4().hex[:8]}"
    first = attempt(durable_url, run_id, "run", "agent")
    assert first.returncode == -signal.SIGKILL, first.stderr
    second = attempt(durable_url, run_id, "recover", "agent")
    assert second.returncode == 0, second.stderr
    report = json.loads(second.stdout.strip().splitlines()[-1])
    assert report["outcomes"] == [[run_id, "support-agent", "completed"]]
    assert report["model_calls"] == 1  # only the answer after the tool: the rest replayed
    assert report["lookups"] == 0  # the finished tool replayed
    assert report["emails"] == 1  # the tool it died in ran again, once
    assert report["result"][-1][1] == "Done: A-17 is paid and the customer was emailed."


def test_a_graph_workflow_killed_in_a_node_is_recovered_from_its_checkpoint(
    durable_url: str,
) -> None:
    run_id = f"g-{uuid.uuid4().hex[:8]}"
    first = attempt(durable_url, run_id, "run", "graph")
    assert first.returncode == -signal.SIGKILL, first.stderr
    second = attempt(durable_url, run_id, "recover", "graph")
    assert second.returncode == 0, second.stderr
    report = json.loads(second.stdout.strip().splitlines()[-1])
    assert report["outcomes"] == [[run_id, "pipeline", "completed"]]
    assert report["paid"] == {"b": 1, "c": 1}  # node a finished before the kill: not rerun
    assert report["result"] == {"done": ["a", "b", "c"]}
