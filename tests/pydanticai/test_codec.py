"""Tool results cross a durable unit as JSON: what pydantic-ai checks after the unit must not
change because of it (pydantic-ai's own `test_many_multimodal_tool_response`, wrapped)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import (
    ImageUrl,
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturn,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

import agentrewind

NESTED = (
    "The return value of tool 'analyze' contains invalid nested `ToolReturn` objects. "
    "`ToolReturn` should be used directly."
)


def _agent(calls: dict[str, int], result: Any) -> Agent[None, str]:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls["model"] = calls.get("model", 0) + 1
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("analyze", {}, tool_call_id="a1")])
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[None, str] = Agent(FunctionModel(model), name="analyst")

    @agent.tool_plain
    def analyze() -> Any:
        calls["analyze"] = calls.get("analyze", 0) + 1
        return result

    return agent


def test_a_list_of_tool_returns_is_refused_as_unwrapped(durable_url: str) -> None:
    nested = [ToolReturn(return_value="ok", content=["chart:", ImageUrl("https://x/c.jpg")]), "x"]
    plain: dict[str, int] = {}
    with pytest.raises(UserError) as unwrapped:
        _agent(plain, nested).run_sync("go")
    assert str(unwrapped.value) == NESTED

    calls: dict[str, int] = {}
    mw = agentrewind.Middleware(durable_url)
    agent = mw.wrap(_agent(calls, nested))
    with pytest.raises(UserError) as wrapped, mw.run("n1"):
        agent.run_sync("go")
    assert str(wrapped.value) == NESTED
    assert calls == plain == {"model": 1, "analyze": 1}
    # refused inside the unit, before JSON: the tool's step failed, nothing was stored as its result
    steps = mw.store.load_steps("n1")
    assert [(s.kind, s.status) for s in steps] == [("llm", "completed"), ("tool", "failed")]
    mw.close()


def test_a_tool_return_with_multimodal_content_records_and_replays(durable_url: str) -> None:
    result = ToolReturn(
        return_value="analysed", content=["chart:", ImageUrl("https://x/c.jpg")], metadata={"k": 1}
    )
    calls: dict[str, int] = {}
    mw = agentrewind.Middleware(durable_url)
    with mw.run("m1"):
        first = mw.wrap(_agent(calls, result)).run_sync("go")
    assert calls == {"model": 2, "analyze": 1}

    again = agentrewind.Middleware(durable_url)  # another middleware: everything from the store
    with again.run("m1"):
        replayed = again.wrap(_agent(calls, result)).run_sync("go")
    assert calls == {"model": 2, "analyze": 1}  # nothing ran again
    assert replayed.output == first.output == "done"

    def sent(messages: list[ModelMessage]) -> list[Any]:
        return [
            (type(p).__name__, getattr(p, "content", None))
            for m in messages
            for p in m.parts
            if not isinstance(p, TextPart | ToolCallPart)
        ]

    assert sent(replayed.all_messages()) == sent(first.all_messages())
    images = [
        c
        for m in replayed.all_messages()
        for p in m.parts
        if isinstance(p, UserPromptPart) and isinstance(p.content, list)
        for c in p.content
    ]
    assert images == ["chart:", ImageUrl("https://x/c.jpg")]
    again.close()
    mw.close()
