"""`middleware.wrap(obj, cache_ttl=, cache=[...])`: the adapters' call sites on the cross-run cache.

A second run (another run id) of a wrapped runnable, agent or graph does not pay for a cached
tool or chat call; sites not named, exceptions and runs without `cache_ttl` still pay.
"""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool

import agentrewind
from agentrewind import CacheConfigError
from agentrewind_langchain.testing import ScriptedChatModel


def cfg(run_id: str) -> Any:
    return {"configurable": {"agentrewind_run_id": run_id}}


def make_body(calls: dict[str, int], *, fail: dict[str, bool] | None = None) -> Any:
    model = ScriptedChatModel(responses=["a short answer"], counter=calls)

    @tool
    def search(q: str) -> str:
        """Search."""
        calls["search"] = calls.get("search", 0) + 1
        if fail and fail.get("search"):
            raise TimeoutError("search timed out")
        return f"found {q}"

    @tool
    def clock(q: str) -> str:
        """Now."""
        calls["clock"] = calls.get("clock", 0) + 1
        return f"time {calls['clock']}"

    def body(q: str) -> str:
        found = search.invoke(q)
        now = clock.invoke(q)
        return f"{model.invoke(found).content} / {now}"

    return body


def test_named_sites_are_served_to_another_run(durable_url: str) -> None:
    calls: dict[str, int] = {}
    mw = agentrewind.Middleware(durable_url)
    wrapped = mw.wrap(
        RunnableLambda(make_body(calls)), cache_ttl=3600, cache=["tool:search", "chat:*"]
    )
    assert wrapped.invoke("q", cfg("a")) == "a short answer / time 1"
    assert calls == {"search": 1, "clock": 1, "calls": 1}
    # Another run id: search and the model are served from the cache, clock is not named.
    assert wrapped.invoke("q", cfg("b")) == "a short answer / time 2"
    assert calls == {"search": 1, "clock": 2, "calls": 1}
    cached = {(s.kind, s.name) for s in mw.store.load_steps("b") if s.meta.get("cached")}
    assert cached == {("tool", "search"), ("llm", "ScriptedChatModel")}
    # Another input pays.
    wrapped.invoke("other", cfg("c"))
    assert calls["search"] == 2
    stats = {s.site: (s.entries, s.hits) for s in mw.cache.stats()}
    assert stats["tool:search"] == (2, 1) and "tool:clock" not in stats
    mw.close()


def test_each_wrapped_object_keeps_its_own_rules(durable_url: str) -> None:
    """Rules belong to the wrapper, not to the middleware: an entry another wrapper stored
    under a site this one does not name is never served to it, sync or async."""
    mw = agentrewind.Middleware(durable_url)
    by_search: dict[str, int] = {}
    by_clock: dict[str, int] = {}
    plain: dict[str, int] = {}
    searching = mw.wrap(RunnableLambda(make_body(by_search)), cache_ttl=3600, cache="tool:search")
    clocking = mw.wrap(RunnableLambda(make_body(by_clock)), cache_ttl=3600, cache="tool:clock")
    unruled = mw.wrap(RunnableLambda(make_body(plain)))
    for run_id in ("s1", "s2"):
        searching.invoke("q", cfg(run_id))
    assert by_search == {"search": 1, "clock": 2, "calls": 2}

    async def twice(wrapped: Any, prefix: str) -> None:
        for n in (1, 2):
            await wrapped.ainvoke("q", cfg(f"{prefix}{n}"))

    asyncio.run(twice(clocking, "c"))  # tool:search "q" is in the cache, not in its rules
    assert by_clock == {"search": 2, "clock": 1, "calls": 2}
    asyncio.run(twice(unruled, "u"))
    assert plain == {"search": 2, "clock": 2, "calls": 2}
    # Wrapped again with other rules: a new wrapper; the first keeps its own.
    again = mw.wrap(searching, cache_ttl=3600, cache=["chat:*"])
    assert again is not searching and searching.cache is not None
    assert searching.cache.patterns == ("tool:search",) and again.cache is not None
    assert again.cache.patterns == ("llm:*",)
    assert mw.wrap(searching) is searching
    hits = {s.site: s.hits for s in mw.cache.stats()}
    assert hits == {"tool:search": 1, "tool:clock": 1}
    mw.close()


def test_nothing_is_cached_without_cache_ttl(sqlite_url: str) -> None:
    calls: dict[str, int] = {}
    mw = agentrewind.Middleware(sqlite_url)
    wrapped = mw.wrap(RunnableLambda(make_body(calls)))
    wrapped.invoke("q", cfg("a"))
    wrapped.invoke("q", cfg("b"))
    assert calls == {"search": 2, "clock": 2, "calls": 2}
    assert mw.cache.stats() == []


def test_an_exception_is_not_cached(sqlite_url: str) -> None:
    calls: dict[str, int] = {}
    fail = {"search": True}
    mw = agentrewind.Middleware(sqlite_url)
    wrapped = mw.wrap(RunnableLambda(make_body(calls, fail=fail)), cache_ttl=60, cache="tool:*")
    with pytest.raises(TimeoutError):
        wrapped.invoke("q", cfg("a"))
    fail["search"] = False
    wrapped.invoke("q", cfg("b"))
    wrapped.invoke("q", cfg("c"))
    assert calls["search"] == 2  # the failure paid, then one success, then a hit


def test_a_resumed_run_replays_its_cached_value(sqlite_url: str) -> None:
    calls: dict[str, int] = {}
    mw = agentrewind.Middleware(sqlite_url)
    wrapped = mw.wrap(RunnableLambda(make_body(calls)), cache_ttl=60, cache=["tool:search"])
    wrapped.invoke("q", cfg("a"))
    wrapped.invoke("q", cfg("b"))  # search: a hit, journaled in b
    mw.cache.clear()
    wrapped.invoke("q", cfg("b"))  # b again: its journal replays, the cache is not asked
    assert calls["search"] == 1


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"cache_ttl": -1, "cache": ["tool:search"]}, "positive"),
        ({"cache_ttl": 0, "cache": ["tool:search"]}, "positive"),
        ({"cache_ttl": "60", "cache": ["tool:search"]}, "number"),
        ({"cache_ttl": 60, "cache": ["tool:search", 3]}, "strings"),
        ({"cache_ttl": 60, "cache": [b"tool:x"]}, "strings"),
        ({"cache_ttl": 60, "cache": ["search"]}, "kind:name"),
        ({"cache_ttl": 60, "cache": []}, "no call site"),
        ({"cache_ttl": 60}, "needs cache="),
        ({"cache": ["tool:*"]}, "needs cache_ttl="),
        ({"cache_ttl": 60, "cache": ["tool:*"], "max_entries": 0}, "max_entries"),
    ],
)
def test_bad_cache_arguments_are_named_errors(
    sqlite_url: str, kwargs: dict[str, Any], match: str
) -> None:
    mw = agentrewind.Middleware(sqlite_url)
    with pytest.raises(CacheConfigError, match=match) as caught:
        mw.wrap(RunnableLambda(lambda x: x), **kwargs)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, TypeError)


STREAMED = "one two three four"


def test_a_cached_stream_replays_its_chunks_in_another_run(durable_url: str) -> None:
    counter: dict[str, int] = {}
    model = ScriptedChatModel(responses=[STREAMED], counter=counter)
    mw = agentrewind.Middleware(durable_url)
    # The model streams inside the wrapped chain (as in an agent), so its call is journaled.
    prompt = ChatPromptTemplate.from_messages([("user", "{q}")])
    wrapped = mw.wrap(prompt | model, cache_ttl=3600, cache=["chat:*"])
    first = [c.content for c in wrapped.stream({"q": "hi"}, cfg("s1"))]
    assert "".join(first) == STREAMED and len(first) == 4
    assert counter == {"calls": 1}
    second = [c.content for c in wrapped.stream({"q": "hi"}, cfg("s2"))]
    assert second == first and counter == {"calls": 1}

    async def main() -> list[Any]:
        return [c.content async for c in wrapped.astream({"q": "hi"}, cfg("s3"))]

    assert asyncio.run(main()) == first and counter == {"calls": 1}
    (stats,) = mw.cache.stats()
    assert (stats.site, stats.hits) == ("llm:ScriptedChatModel", 2)


class State(TypedDict):
    topic: str
    notes: Annotated[list[str], operator.add]


def test_a_langgraph_graph_caches_its_calls_across_threads(durable_url: str) -> None:
    graph_mod = pytest.importorskip("langgraph.graph")
    calls: dict[str, int] = {}
    model = ScriptedChatModel(responses=["an outline"], counter=calls)

    @tool
    def fetch(url: str) -> str:
        """Fetch a page."""
        calls["fetch"] = calls.get("fetch", 0) + 1
        return f"page {url}"

    def research(state: State) -> dict[str, Any]:
        return {"notes": [fetch.invoke(state["topic"])]}

    def write(state: State) -> dict[str, Any]:
        return {"notes": [str(model.invoke(state["notes"][-1]).content)]}

    builder = graph_mod.StateGraph(State)
    builder.add_node("research", research)
    builder.add_node("write", write)
    builder.add_edge(graph_mod.START, "research")
    builder.add_edge("research", "write")
    builder.add_edge("write", graph_mod.END)
    mw = agentrewind.Middleware(durable_url)
    graph = mw.wrap(builder.compile(), cache_ttl=3600, cache=["tool:fetch", "llm:*"])
    for thread in ("t1", "t2"):
        out = graph.invoke({"topic": "x", "notes": []}, {"configurable": {"thread_id": thread}})
        assert out["notes"] == ["page x", "an outline"]
    assert calls == {"fetch": 1, "calls": 1}
