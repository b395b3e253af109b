"""RewindAgentMiddleware: create_agent(middleware=[...]) records and replays without patches."""

from __future__ import annotations

import gc
import time
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from lc_support import RESPONSES, Flaky, contents, make_tools

import agentrewind
from agentrewind import AgentRewindError
from agentrewind_langchain import RewindAgentMiddleware
from agentrewind_langchain.testing import ScriptedChatModel

INPUT = {"messages": [("user", "Check order A-17 and email the customer")]}


def agent(flaky: Flaky, counter: dict[str, int], url: str) -> object:
    model = ScriptedChatModel(responses=RESPONSES, counter=counter)
    return create_agent(model, make_tools(flaky), middleware=[RewindAgentMiddleware(url)])


def test_rerun_replays_model_and_tool_calls(durable_url: str) -> None:
    cfg = {"configurable": {"thread_id": "am-1"}}
    flaky, counter = Flaky(), {}
    with pytest.raises(ConnectionError):
        agent(flaky, counter, durable_url).invoke(INPUT, cfg)
    assert (counter["calls"], flaky.lookups) == (2, 1)
    flaky2, counter2 = Flaky(), {}
    flaky2.fail = False
    result = agent(flaky2, counter2, durable_url).invoke(INPUT, cfg)
    assert (counter2["calls"], flaky2.lookups, flaky2.emails) == (1, 0, 1)
    assert contents(result)[-1][1].startswith("Done")


async def test_async_rerun(sqlite_url: str) -> None:
    cfg = {"configurable": {"thread_id": "am-2"}}
    flaky, counter = Flaky(), {}
    with pytest.raises(ConnectionError):
        await agent(flaky, counter, sqlite_url).ainvoke(INPUT, cfg)
    flaky2, counter2 = Flaky(), {}
    flaky2.fail = False
    result = await agent(flaky2, counter2, sqlite_url).ainvoke(INPUT, cfg)
    assert (counter2["calls"], flaky2.lookups, flaky2.emails) == (1, 0, 1)
    assert contents(result)[-1][1].startswith("Done")


def test_needs_a_thread_id(sqlite_url: str) -> None:
    flaky = Flaky()
    with pytest.raises(AgentRewindError, match="thread_id"):
        agent(flaky, {}, sqlite_url).invoke(INPUT)


# -- the run's life: it never outlives its invocation ---------------------------------------
class FailAfterModel(AgentMiddleware):  # type: ignore[type-arg]
    """Raises in `after_model` (outside RewindAgentMiddleware's hooks) while `fail` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.fail = True

    def after_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        if self.fail:
            raise ValueError("boom outside the rewind hooks")
        return None

    async def aafter_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return self.after_model(state, runtime)


def failing_agent(rewind: RewindAgentMiddleware, failer: FailAfterModel, counter: dict[str, int]):
    model = ScriptedChatModel(responses=RESPONSES, counter=counter)
    flaky = Flaky()
    flaky.fail = False
    return create_agent(model, make_tools(flaky), middleware=[rewind, failer])


def wait_for_status(store: Any, run_id: str, status: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = store.get_run(run_id)
        if info is not None and info.status == status:
            return
        gc.collect()  # the invocation's objects may sit in a reference cycle
        time.sleep(0.02)
    info = store.get_run(run_id)
    raise AssertionError(f"run {run_id} is {info.status if info else None!r}, not {status!r}")


def test_error_outside_the_hooks_closes_the_run_when_the_invocation_ends(
    durable_url: str,
) -> None:
    rewind = RewindAgentMiddleware(durable_url)
    cfg = {"configurable": {"thread_id": "am-outside"}}
    counter: dict[str, int] = {}
    with pytest.raises(ValueError, match="outside the rewind hooks"):
        failing_agent(rewind, FailAfterModel(), counter).invoke(INPUT, cfg)
    assert counter["calls"] == 1
    # No other invocation comes: the run is still closed and its lease released.
    wait_for_status(rewind.middleware.store, "am-outside", "paused")
    assert len(rewind._runs) == 0
    other = agentrewind.Middleware(durable_url)  # another owner: no RunLockedError
    with other.run("am-outside") as run:
        assert len(run._records) == 1  # the model call that finished is journaled
    other.close()


def test_a_later_invocation_closes_a_run_left_open(sqlite_url: str) -> None:
    rewind = RewindAgentMiddleware(sqlite_url)
    cfg = {"configurable": {"thread_id": "am-stale"}}
    failer, counter = FailAfterModel(), {}
    with pytest.raises(ValueError) as kept:  # keeps the failed invocation's frames alive
        failing_agent(rewind, failer, counter).invoke(INPUT, cfg)
    assert len(rewind._runs) == 1  # still open: its invocation's objects are referenced
    failer.fail = False
    result = failing_agent(rewind, failer, counter).invoke(INPUT, cfg)
    assert contents(result)[-1][1].startswith("Done")
    assert counter["calls"] == 3  # the first model call replayed, the two others ran
    assert rewind.middleware.store.get_run("am-stale").status == "completed"
    assert len(rewind._runs) == 0
    del kept


async def test_async_error_outside_the_hooks_closes_the_run(sqlite_url: str) -> None:
    rewind = RewindAgentMiddleware(sqlite_url)
    cfg = {"configurable": {"thread_id": "am-async-outside"}}
    with pytest.raises(ValueError):
        await failing_agent(rewind, FailAfterModel(), {}).ainvoke(INPUT, cfg)
    wait_for_status(rewind.middleware.store, "am-async-outside", "paused")
    with agentrewind.Middleware(sqlite_url).run("am-async-outside") as run:
        assert len(run._records) == 1


def test_an_error_inside_a_hook_closes_the_run_as_failed(sqlite_url: str) -> None:
    rewind = RewindAgentMiddleware(sqlite_url)
    cfg = {"configurable": {"thread_id": "am-inside"}}
    flaky = Flaky()
    model = ScriptedChatModel(responses=RESPONSES)
    with pytest.raises(ConnectionError):
        create_agent(model, make_tools(flaky), middleware=[rewind]).invoke(INPUT, cfg)
    assert rewind.middleware.store.get_run("am-inside").status == "failed"
    assert len(rewind._runs) == 0
