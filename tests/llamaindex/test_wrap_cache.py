"""`middleware.wrap(workflow, cache_ttl=, cache=[...])`: the LLM and tool calls of a LlamaIndex
workflow's steps served across runs from the cross-run cache."""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool
from workflows import Workflow, step
from workflows.events import StartEvent, StopEvent

import agentrewind

CALLS: dict[str, int] = {}


def _script(messages, **kwargs):
    CALLS["llm"] = CALLS.get("llm", 0) + 1
    return ChatMessage(role="assistant", content=f"about {messages[-1].content}")


def lookup(city: str) -> str:
    """Weather of a city."""
    CALLS["lookup"] = CALLS.get("lookup", 0) + 1
    return f"sunny in {city}"


class Forecast(Workflow):
    @step
    async def answer(self, ev: StartEvent) -> StopEvent:
        tool = FunctionTool.from_defaults(lookup)
        llm = MockFunctionCallingLLM(response_generator=_script)
        found = (await tool.acall(city=ev.city)).content
        streamed = [c.delta async for c in await llm.astream_chat([ChatMessage(content=found)])]
        return StopEvent(result={"found": found, "said": "".join(d or "" for d in streamed)})


@pytest.fixture(params=["sqlite", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path, namespace: str) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    return f"{request.getfixturevalue('redis_url')}?namespace={namespace}"


async def test_tool_and_streamed_llm_calls_are_served_to_another_run(url: str) -> None:
    CALLS.clear()
    mw = agentrewind.Middleware(url)
    wf = mw.wrap(Forecast(timeout=30), cache_ttl=3600, cache=["tool:lookup", "chat:*"])
    first = await wf.run(run_id="a", city="Oslo")
    assert first == {"found": "sunny in Oslo", "said": first["said"]} and first["said"]
    assert CALLS == {"lookup": 1, "llm": 1}
    assert await wf.run(run_id="b", city="Oslo") == first
    assert CALLS == {"lookup": 1, "llm": 1}
    cached = {(s.kind, s.name) for s in mw.store.load_steps("b") if s.meta.get("cached")}
    assert cached == {("tool", "lookup"), ("llm", "MockFunctionCallingLLM")}
    await wf.run(run_id="c", city="Bergen")  # another input pays
    assert CALLS == {"lookup": 2, "llm": 2}
    mw.close()


async def test_nothing_is_cached_without_cache_ttl(tmp_path: Path) -> None:
    CALLS.clear()
    mw = agentrewind.Middleware(f"sqlite:///{tmp_path / 'runs.db'}")
    wf = mw.wrap(Forecast(timeout=30))
    await wf.run(run_id="a", city="Oslo")
    await wf.run(run_id="b", city="Oslo")
    assert CALLS == {"lookup": 2, "llm": 2}
    mw.close()
