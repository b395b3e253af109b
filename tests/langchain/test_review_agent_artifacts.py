"""Review: a tool whose artifact cannot be journaled still returns through both integrations."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.tools import tool

import agentrewind
from agentrewind_langchain import RewindAgentMiddleware
from agentrewind_langchain.testing import ScriptedChatModel, tool_call


class Blob:
    """Not storable by the safe serializer."""


def _fetch_tool(runs: dict[str, int]) -> Any:
    @tool(response_format="content_and_artifact")
    def fetch(q: str) -> tuple[str, Blob]:
        """Fetch a document."""
        runs["n"] += 1
        return f"got {q}", Blob()

    return fetch


def _agent(url: str, runs: dict[str, int], mode: str) -> Any:
    model = ScriptedChatModel(responses=[tool_call("fetch", {"q": "x"}), "done"])
    if mode == "agent-middleware":
        return create_agent(model, [_fetch_tool(runs)], middleware=[RewindAgentMiddleware(url)])
    return agentrewind.Middleware(url).wrap(create_agent(model, [_fetch_tool(runs)]))


@pytest.mark.parametrize("mode", ["agent-middleware", "wrap"])
def test_unstorable_tool_artifact_is_returned_and_re_runs_on_resume(
    sqlite_url: str, mode: str
) -> None:
    runs = {"n": 0}
    cfg = {"configurable": {"thread_id": f"art-{mode}"}}
    out = _agent(sqlite_url, runs, mode).invoke({"messages": [("user", "hi")]}, cfg)
    assert out["messages"][-1].content == "done"
    assert isinstance(out["messages"][2].artifact, Blob)
    assert runs["n"] == 1
    with agentrewind.connect(sqlite_url) as store:
        tools = [s for s in store.load_steps(cfg["configurable"]["thread_id"]) if s.kind == "tool"]
        assert [s.status for s in tools] == ["started"]  # never journaled as completed


@pytest.mark.parametrize("mode", ["agent-middleware", "wrap"])
async def test_unstorable_tool_artifact_async(sqlite_url: str, mode: str) -> None:
    runs = {"n": 0}
    cfg = {"configurable": {"thread_id": f"art-a-{mode}"}}
    out = await _agent(sqlite_url, runs, mode).ainvoke({"messages": [("user", "hi")]}, cfg)
    assert out["messages"][-1].content == "done"
    assert runs["n"] == 1
