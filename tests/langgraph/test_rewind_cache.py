"""`agentrewind_langgraph.RewindCache`: LangGraph's node cache on the cross-run cache (issue 28)."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from pathlib import Path
from typing import Any, TypedDict

import ormsgpack
import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import CachePolicy

from agentrewind.adapters import CacheEntry
from agentrewind_langgraph import RewindCache, UnsafeCheckpointError


class State(TypedDict):
    q: str
    answer: str


def _graph(cache: RewindCache, calls: list[str]) -> Any:
    def search(state: State) -> dict[str, str]:
        calls.append(state["q"])
        return {"answer": state["q"].upper()}

    builder = StateGraph(State)
    builder.add_node("search", search, cache_policy=CachePolicy(ttl=3600))
    builder.add_edge(START, "search")
    builder.add_edge("search", END)
    return builder.compile(cache=cache)


def test_a_cached_node_runs_once_for_two_threads(saver_url_with_cluster: str) -> None:
    calls: list[str] = []
    first = RewindCache(saver_url_with_cluster)
    graph = _graph(first, calls)
    config = {"configurable": {"thread_id": "t1"}}
    assert graph.invoke({"q": "q"}, config)["answer"] == "Q"
    first.close()
    second = RewindCache(saver_url_with_cluster)  # another cache object on the same store
    graph = _graph(second, calls)
    assert graph.invoke({"q": "q"}, {"configurable": {"thread_id": "t2"}})["answer"] == "Q"
    assert calls == ["q"]
    assert graph.invoke({"q": "r"}, {"configurable": {"thread_id": "t3"}})["answer"] == "R"
    assert calls == ["q", "r"]
    (stats,) = second.store.cache.stats()
    assert stats.site.startswith("node:") and (stats.entries, stats.hits) == (2, 1)
    second.clear()
    assert graph.invoke({"q": "q"}, {"configurable": {"thread_id": "t4"}})["answer"] == "Q"
    assert calls == ["q", "r", "q"]
    second.close()


def test_async_graph_and_ttl(saver_url: str) -> None:
    calls: list[str] = []
    cache = RewindCache(saver_url)

    async def main() -> None:
        graph = _graph(cache, calls)
        for thread in ("a", "b"):
            out = await graph.ainvoke({"q": "x"}, {"configurable": {"thread_id": thread}})
            assert out["answer"] == "X"
        await cache.aset({(("ns",), "k"): ({"v": 1}, 1)})
        assert await cache.aget([(("ns",), "k")]) == {(("ns",), "k"): {"v": 1}}
        await cache.aclear([("ns",)])
        assert await cache.aget([(("ns",), "k")]) == {}

    asyncio.run(main())
    assert calls == ["x"]
    cache.close()


def test_a_crafted_entry_naming_os_system_executes_nothing(saver_url: str, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    evil = ormsgpack.Ext(0, ormsgpack.packb(("os", "system", f"touch {marker}")))
    blob = ormsgpack.packb({"ok": 1, "evil": evil})
    cache = RewindCache(saver_url)
    text = json.dumps({"t": "msgpack", "b": base64.b64encode(blob).decode()})
    key = uuid.uuid4().hex
    cache.store.cache.put("node:ns", key, CacheEntry(text.encode()), ttl=None)
    with pytest.raises(UnsafeCheckpointError) as info:
        cache.get([(("ns",), key)])
    assert info.value.type_name == "os.system"
    assert not marker.exists()
    cache.close()
