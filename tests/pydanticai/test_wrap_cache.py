"""`middleware.wrap(agent, cache_ttl=, cache=[...])`: a pydantic-ai agent's model requests and
tool calls served across runs from the cross-run cache (SQLite, Redis, PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import agentrewind


def build(calls: dict[str, int]) -> Agent[None, str]:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls["model"] = calls.get("model", 0) + 1
        returned = [
            p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)
        ]
        if not returned:
            return ModelResponse(parts=[ToolCallPart("search", {"q": "weather"}, "call-1")])
        return ModelResponse(parts=[TextPart(f"answer: {returned[-1].content}")])

    agent: Agent[None, str] = Agent(FunctionModel(model), name="cached")

    @agent.tool_plain
    def search(q: str) -> str:
        """Search."""
        calls["search"] = calls.get("search", 0) + 1
        return f"sunny ({q})"

    return agent


def test_tool_and_model_calls_are_served_to_another_run(durable_url: str) -> None:
    calls: dict[str, int] = {}
    mw = agentrewind.Middleware(durable_url)
    # The sites as the journal names them (`agentrewind log`): pydantic-ai's tool calls are
    # `<agent>__<toolset>.call_tool:<tool>`, its model requests `<agent>__model.request`.
    agent = mw.wrap(build(calls), cache_ttl=3600, cache=["tool:*:search"])
    with mw.run("a"):
        assert agent.run_sync("hi").output == "answer: sunny (weather)"
    assert calls == {"model": 2, "search": 1}
    with mw.run("b"):
        assert agent.run_sync("hi").output == "answer: sunny (weather)"
    assert calls == {"model": 4, "search": 1}  # the model is not named: it pays
    cached = [(r.kind, r.meta.get("cached", False)) for r in mw.store.load_steps("b")]
    assert ("tool", True) in cached and ("llm", True) not in cached
    # Another middleware on the same store, with the model too: a third run pays for nothing.
    other = agentrewind.Middleware(durable_url)
    both = other.wrap(build(calls), cache_ttl=3600, cache=["tool:*", "chat:cached__*"])
    with other.run("c"):
        both.run_sync("hi")
    with other.run("d"):
        assert both.run_sync("hi").output == "answer: sunny (weather)"
    assert calls == {"model": 6, "search": 1}
    mw.close()  # writes the hit counts `mw` still holds (counts are written in batches)
    sites = {s.site: s.hits for s in other.cache.stats()}
    assert sites["tool:cached__function_toolset__<agent>.call_tool:search"] == 3
    assert sum(v for k, v in sites.items() if k.startswith("llm:")) == 2
    other.close()


def test_nothing_is_cached_without_cache_ttl(durable_url: str) -> None:
    calls: dict[str, int] = {}
    mw = agentrewind.Middleware(durable_url)
    agent = mw.wrap(build(calls))
    for run_id in ("a", "b"):
        with mw.run(run_id):
            agent.run_sync("hi")
    assert calls == {"model": 4, "search": 2}
    mw.close()


def test_two_wrapped_agents_keep_their_own_rules(tmp_path: Path) -> None:
    mw = agentrewind.Middleware(f"sqlite:///{tmp_path / 'runs.db'}")
    cached_calls: dict[str, int] = {}
    plain_calls: dict[str, int] = {}
    cached = mw.wrap(build(cached_calls), cache_ttl=3600, cache=["tool:*:search"])
    plain = mw.wrap(build(plain_calls))
    for run_id in ("a", "b"):
        with mw.run(run_id):
            cached.run_sync("hi")
    assert cached_calls == {"model": 4, "search": 1}
    for run_id in ("c", "d"):  # the entry `cached` stored is not served to `plain`
        with mw.run(run_id):
            plain.run_sync("hi")
    assert plain_calls == {"model": 4, "search": 2}
    assert [s.hits for s in mw.cache.stats()] == [1]
    mw.close()
