"""Workflows in one process, on every store (issue 24): sync and async bodies, recorded
results, recovery at start-up, failed runs, the CLI's cancel and resume."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys

import pytest

import agentrewind
from agentrewind.journal.workflow import recorded_call


def _crash(store: agentrewind.Store, run_id: str) -> None:
    """Leave `run_id` as a process that died mid-run leaves it: running, a dead owner's lease."""
    pid = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                         capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    store.begin_run(run_id)
    assert store.acquire_lease(run_id, f"{socket.gethostname()}:{pid}:x", 30).acquired


def test_async_and_sync_workflows_record_once_and_return_the_recorded_result(
    store_url: str,
) -> None:
    mw = agentrewind.Middleware(store_url)
    calls: list[str] = []

    @mw.workflow("greet")
    async def greet(name: str, *, punct: str = "!") -> str:
        await mw.step("upper")(_upper)(name, calls)
        return f"hello {name.upper()}{punct}"

    @mw.workflow("add")
    def add(a: int, b: int) -> int:
        calls.append("add")
        return a + b

    assert asyncio.run(greet.arun("ann", punct="?", run_id="g")) == "hello ANN?"
    assert greet.run("ann", punct="?", run_id="g") == "hello ANN?"  # recorded, not run
    assert asyncio.run(add.arun(2, 3, run_id="a")) == 5  # a sync body in a thread
    assert add(2, 3) == 5  # a new run id each call
    assert calls == ["ann", "add", "add"]
    call = recorded_call(mw.store, mw, "g")
    assert call is not None and (call.workflow, call.args, call.kwargs) == (
        "greet",
        ("ann",),
        {"punct": "?"},
    )
    assert [r.status for r in mw.store.list_runs()] == ["completed"] * 3
    mw.close()


async def _upper(name: str, calls: list[str]) -> str:
    calls.append(name)
    return name.upper()


def test_recover_on_start_resumes_crashed_runs_in_the_background(store_url: str) -> None:
    first = agentrewind.Middleware(store_url)
    first.workflow("double", lambda x: 2 * x).run(21, run_id="d")
    _crash(first.store, "d")
    mw = agentrewind.Middleware(first.store, recover_on_start=True)
    wf = mw.workflow("double", lambda x: 2 * x)
    assert mw.recovery is None  # nothing happens until first use
    assert wf.run(1, run_id="other") == 2
    assert mw.recovery is not None
    mw.recovery.join(30)
    assert mw.last_recovery is not None
    assert [(o.run_id, o.outcome, o.result) for o in mw.last_recovery.outcomes] == [
        ("d", "completed", 42)
    ]
    first.close()


def test_failed_runs_are_retried_only_when_asked(store_url: str) -> None:
    mw = agentrewind.Middleware(store_url)
    attempts: list[int] = []

    @mw.workflow("flaky")
    def flaky() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("API down")
        return "ok"

    with pytest.raises(ConnectionError):
        flaky.run(run_id="f")
    assert mw.store.get_run("f").status == "failed"  # type: ignore[union-attr]
    assert mw.recover().outcomes == []
    report = asyncio.run(mw.arecover(include_failed=True))
    assert [(o.run_id, o.outcome, o.result) for o in report.outcomes] == [("f", "completed", "ok")]
    assert len(attempts) == 2
    mw.close()


def test_the_cli_cancels_and_clears_the_mark_for_a_worker(store_url: str) -> None:
    if store_url.startswith("memory://"):
        pytest.skip("a new process cannot see a memory store")
    mw = agentrewind.Middleware(store_url)
    mw.workflow("noop", lambda: None).run(run_id="done")
    mw.store.begin_run("c")
    cli = [sys.executable, "-m", "agentrewind", "--store", store_url]
    out = subprocess.run([*cli, "cancel", "c"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout == "c: cancelled\n", out
    assert mw.store.get_run("c").status == "cancelled"  # type: ignore[union-attr]
    listed = subprocess.run([*cli, "runs", "--status", "cancelled"], capture_output=True, text=True)
    assert [ln.split()[:3] for ln in listed.stdout.splitlines()[1:]] == [
        ["c", "journal", "cancelled"]
    ]
    refused = subprocess.run([*cli, "cancel", "done"], capture_output=True, text=True)
    assert refused.returncode == 1 and "it is completed" in refused.stderr
    out = subprocess.run([*cli, "resume", "c"], capture_output=True, text=True)
    assert out.returncode == 0, out
    assert mw.store.get_run("c").status == "crashed"  # type: ignore[union-attr]
    again = subprocess.run([*cli, "resume", "c"], capture_output=True, text=True)
    assert again.returncode == 1 and "nothing was changed" in again.stderr
    mw.close()


def test_fork_copies_a_workflow_run_up_to_a_step_and_resume_runs_it_on(store_url: str) -> None:
    mw = agentrewind.Middleware(store_url)
    calls: list[int] = []

    @mw.workflow("steps")
    def steps(n: int) -> list[int]:
        return [
            mw.step(f"s{i}", side_effects=False)(lambda i=i: calls.append(i) or i)()
            for i in range(n)
        ]

    assert steps.run(3, run_id="orig") == [0, 1, 2]
    s0 = next(r for r in mw.store.load_steps("orig") if r.name == "s0")
    forked = mw.fork("orig", at=s0.seq, to="copy")
    assert (forked.run_id, forked.source_run, forked.at.step_id, forked.source) == (
        "copy", "orig", s0.step_id, "agentrewind",
    )  # fmt: skip
    assert forked.steps == 2  # the workflow's arguments and s0
    with pytest.raises(agentrewind.DocumentError):
        mw.fork("orig", at=s0.seq, to="copy")  # exists
    with pytest.raises(agentrewind.RunNotFoundError):
        mw.fork("orig", at="99", to="other")
    assert mw.resume("copy") == [0, 1, 2]
    assert calls == [0, 1, 2, 1, 2]  # s0 replayed in the copy; s1 and s2 ran on from the fork
    last = max(r.seq for r in mw.store.load_steps("copy"))
    again = asyncio.run(mw.afork("copy", at=last, to="copy2"))
    assert again.steps == len(mw.store.load_steps("copy")) - 1  # all but the copy's origin
    mw.close()


def test_the_viewer_shows_a_cancelled_run_with_its_cancel_time(store_url: str) -> None:
    from agentrewind.ui import api

    mw = agentrewind.Middleware(store_url)
    mw.store.begin_run("v")
    mw.cancel("v")
    (row,) = [r for r in api.list_runs(mw.store) if r["run_id"] == "v"]
    assert row["status"] == "cancelled" and row["cancelled_at"] is not None
    assert row["cancelled_at"] <= mw.store.get_run("v").updated_at + 60  # type: ignore[union-attr]
    mw.close()
