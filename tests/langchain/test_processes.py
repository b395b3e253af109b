"""Across processes: run 1 is SIGKILLed inside a tool call; run 2 in a new process finishes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from lc_support import Flaky, contents, make_agent

HERE = Path(__file__).parent
INPUT = {"messages": [("user", "Check order A-17 and email the customer")]}


def attempt(url: str, run_id: str, mode: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-W", "error", str(HERE / "_agent_process.py"), url, run_id, mode],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_sigkill_inside_a_tool_then_resume_in_a_new_process(durable_url: str) -> None:
    run_id = f"kill-{uuid.uuid4().hex[:8]}"
    first = attempt(durable_url, run_id, "kill")
    assert first.returncode == -signal.SIGKILL, first.stderr

    second = attempt(durable_url, run_id, "finish")
    assert second.returncode == 0, second.stderr
    report = json.loads(second.stdout.strip().splitlines()[-1])
    assert report["model_calls"] == 1  # only the final answer is new
    assert report["lookups"] == 0  # the finished tool replayed
    assert report["emails"] == 1  # the killed tool call ran again (at-least-once)...
    assert report["reruns"] == 1  # ...counted as a rerun of a started call
    assert second.stderr.count("RerunWarning") == 1 and "email" in second.stderr  # and said
    assert report["replay_hits"] == 3

    flaky = Flaky()
    flaky.fail = False
    never_failed = contents(make_agent(flaky, {}).invoke(INPUT))
    assert [tuple(x) for x in report["result"]] == [
        (t, c, [list(call) for call in calls]) for t, c, calls in never_failed
    ]
