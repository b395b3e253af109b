"""RewindAgentMiddleware: create_agent(middleware=[...]) records and replays without patches."""

from __future__ import annotations

import pytest
from langchain.agents import create_agent

from agentrewind import AgentRewindError
from agentrewind_langchain import RewindAgentMiddleware
from agentrewind_langchain.testing import ScriptedChatModel
from conftest import RESPONSES, Flaky, contents, make_tools

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
