"""Review: every side-effect policy for a tool that started and never finished, sync and async."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool

import agentrewind
from agentrewind import IncompleteStepError
from agentrewind_langchain import Middleware


def _crashed_inside(mw: Middleware, run_id: str, ran: list[int], policy: str | None) -> Any:
    @tool
    def send(n: int) -> str:
        """Send."""
        ran.append(n)
        return f"sent {n}"

    if policy is not None:
        send.metadata = {"agentrewind_on_incomplete": policy}

    async def asend(n: int) -> Any:
        return await send.ainvoke({"n": n})  # the async tool funnel (`BaseTool.arun`)

    wrapped = mw.wrap(RunnableLambda(lambda n: send.invoke({"n": n}), afunc=asend))
    assert wrapped.invoke(1, {"configurable": {"thread_id": run_id}}) == "sent 1"
    (done,) = mw.store.load_steps(run_id)
    # as if the process died between the `started` and `completed` records
    mw.store.put_step(dataclasses.replace(done, status="started", output=None))
    return wrapped


def test_policy_raise_stops_before_running_the_tool_again(sqlite_url: str) -> None:
    mw = Middleware(sqlite_url, on_incomplete="raise")
    ran: list[int] = []
    wrapped = _crashed_inside(mw, "pol-raise", ran, None)
    with pytest.raises(IncompleteStepError, match="never completed"):
        wrapped.invoke(1, {"configurable": {"thread_id": "pol-raise"}})
    assert ran == [1]
    assert mw.store.get_run("pol-raise").status == "failed"


def test_per_tool_policy_overrides_the_middleware(sqlite_url: str) -> None:
    mw = Middleware(sqlite_url, on_incomplete="raise")
    ran: list[int] = []
    wrapped = _crashed_inside(mw, "pol-rerun", ran, "rerun")
    with pytest.warns(agentrewind.RerunWarning):
        assert wrapped.invoke(1, {"configurable": {"thread_id": "pol-rerun"}}) == "sent 1"
    assert ran == [1, 1]
    assert mw.metrics("pol-rerun").reruns == 1
    killed, step = mw.store.load_steps("pol-rerun")  # the killed attempt is kept
    assert (killed.status, step.status) == ("started", "completed")
    assert killed.meta["replaced_by"] == step.step_id


async def test_async_skip_does_not_run_the_tool(sqlite_url: str) -> None:
    mw = Middleware(sqlite_url, on_incomplete="skip")
    ran: list[int] = []
    wrapped = _crashed_inside(mw, "pol-skip", ran, None)
    out = await wrapped.ainvoke(1, {"configurable": {"thread_id": "pol-skip"}})
    assert "skipped" in out and ran == [1]
