"""LlamaIndex runs log their resume decision at DEBUG under agentrewind.*, nothing louder."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from workflows import Context, Workflow, step
from workflows.events import StartEvent, StopEvent

import agentrewind

flaky = {"fail": True}


class Flaky(Workflow):
    @step
    async def write(self, ctx: Context, ev: StartEvent) -> StopEvent:
        if flaky["fail"]:
            raise ConnectionError("publishing API timed out")
        return StopEvent(result="done")


async def test_resume_is_one_debug_line(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    caplog.set_level(logging.DEBUG, logger="agentrewind")
    middleware = agentrewind.Middleware(f"sqlite:///{tmp_path / 'runs.db'}")
    workflow = middleware.wrap(Flaky(timeout=30))
    flaky["fail"] = True
    with pytest.raises(ConnectionError):
        await workflow.run(run_id="essay")
    flaky["fail"] = False
    assert await workflow.run(run_id="essay") == "done"
    middleware.close()
    ours = [r for r in caplog.records if r.name.startswith("agentrewind")]
    resumes = [r.getMessage() for r in ours if r.name == "agentrewind.llamaindex"]
    assert len(resumes) == 2, resumes
    assert "starts (0 journaled tick(s)" in resumes[0]
    assert "resumes (" in resumes[1]
    # The failure is the user's exception, raised to the caller: not logged above DEBUG by us.
    assert {r.levelno for r in ours} == {logging.DEBUG}
