"""`agentrewind_langchain.RewindCache`: LangChain's `BaseCache` on the cross-run cache."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from langchain_core.globals import set_llm_cache
from langchain_core.load import dumps
from langchain_core.messages import HumanMessage

import agentrewind
from agentrewind import SerializationError
from agentrewind.adapters import CacheEntry
from agentrewind_langchain import RewindCache
from agentrewind_langchain.testing import ScriptedChatModel


@pytest.fixture
def global_cache() -> Any:
    yield
    set_llm_cache(None)


def test_set_llm_cache_serves_the_second_invoke(durable_url: str, global_cache: Any) -> None:
    counter: dict[str, int] = {}
    first = RewindCache(durable_url, ttl=3600)
    set_llm_cache(first)
    model = ScriptedChatModel(responses=["hello there"], counter=counter)
    reply = model.invoke([HumanMessage("hi", id="msg-1")])
    assert reply.content == "hello there" and counter == {"calls": 1}
    first.close()
    # Another cache object on the same store (as another process would open), a fresh model,
    # and a message id of its own: served from the cache.
    second = RewindCache(durable_url, ttl=3600)
    set_llm_cache(second)
    again = ScriptedChatModel(responses=["something else"], counter=counter)
    assert again.invoke([HumanMessage("hi", id="msg-2")]).content == "hello there"
    assert counter == {"calls": 1}
    # Another prompt, or another model, pays.
    assert again.invoke([HumanMessage("bye")]).content == "something else"
    other = ScriptedChatModel(responses=["x"], model="scripted-2", counter=counter)
    assert other.invoke([HumanMessage("hi")]).content == "x"
    assert counter == {"calls": 3}
    (stats,) = second.store.cache.stats()
    assert (stats.site, stats.entries, stats.hits) == ("llm:langchain", 3, 1)
    assert stats.tokens_saved == 30
    second.clear()
    assert second.store.cache.stats() == []
    second.close()


STREAMED = "one two three four"


def stream(model: Any, config: Any = None) -> list[str]:
    return [str(c.content) for c in model.stream("hi", config)]


def astream(model: Any, config: Any = None) -> list[str]:
    async def main() -> list[str]:
        return [str(c.content) async for c in model.astream("hi", config)]

    return asyncio.run(main())


def test_set_llm_cache_serves_the_second_invoke_and_the_second_stream(
    durable_url: str, global_cache: Any
) -> None:
    """LangChain asks a `BaseCache` only from `_generate_with_cache`; `stream` goes there when
    the model does not stream (its `disable_streaming=True`): then the stream is a hit."""
    counter: dict[str, int] = {}
    cache = RewindCache(durable_url, ttl=3600)
    set_llm_cache(cache)
    model = ScriptedChatModel(responses=[STREAMED], counter=counter, disable_streaming=True)
    assert model.invoke("hi").content == STREAMED and counter == {"calls": 1}
    assert model.invoke("hi").content == STREAMED and counter == {"calls": 1}
    assert stream(model) == [STREAMED] and counter == {"calls": 1}
    assert astream(model) == [STREAMED] and counter == {"calls": 1}
    fresh = ScriptedChatModel(responses=[STREAMED], counter=counter, disable_streaming=True)
    assert stream(fresh) == [STREAMED] and counter == {"calls": 1}  # a stream first: a hit too
    (stats,) = cache.store.cache.stats()
    assert (stats.site, stats.entries, stats.hits) == ("llm:langchain", 1, 4)
    cache.close()


def test_a_streaming_models_second_stream_needs_wrap_cache(
    durable_url: str, global_cache: Any
) -> None:
    """A model that streams: langchain-core's `stream`/`astream` call `_stream` and never
    `BaseCache.lookup`/`update`, so `set_llm_cache` serves nothing; the same model wrapped with
    `cache=["chat:*"]` (on the same store) streams once, then yields the chunks from the cache."""
    counter: dict[str, int] = {}
    cache = RewindCache(durable_url, ttl=3600)
    set_llm_cache(cache)
    model = ScriptedChatModel(responses=[STREAMED], counter=counter)
    assert "".join(stream(model)) == STREAMED and "".join(astream(model)) == STREAMED
    assert counter == {"calls": 2}  # neither asked nor filled the BaseCache
    assert cache.store.cache.stats() == []
    mw = agentrewind.Middleware(cache.store)
    wrapped = mw.wrap(model, cache_ttl=3600, cache=["chat:*"])
    first = stream(wrapped, {"configurable": {"agentrewind_run_id": "a"}})
    assert "".join(first) == STREAMED and len(first) == 4 and counter == {"calls": 3}
    assert stream(wrapped, {"configurable": {"agentrewind_run_id": "b"}}) == first
    assert astream(wrapped, {"configurable": {"agentrewind_run_id": "c"}}) == first
    assert counter == {"calls": 3}
    (stats,) = mw.cache.stats()
    assert (stats.site, stats.hits) == ("llm:ScriptedChatModel", 2)
    cache.close()


def test_model_cache_async(durable_url: str) -> None:
    counter: dict[str, int] = {}
    cache = RewindCache(durable_url, ttl=3600)
    model = ScriptedChatModel(responses=["async reply"], counter=counter, cache=cache)

    async def main() -> list[Any]:
        out = [await model.ainvoke("hi"), await model.ainvoke("hi")]
        await cache.aclear()
        out.append(await model.ainvoke("hi"))
        return [m.content for m in out]

    assert asyncio.run(main()) == ["async reply"] * 3
    assert counter == {"calls": 2}
    cache.close()


def test_a_crafted_entry_naming_os_system_executes_nothing(sqlite_url: str, tmp_path: Any) -> None:
    marker = tmp_path / "pwned"
    cache = RewindCache(sqlite_url)
    model = ScriptedChatModel(responses=["fine"], cache=cache)
    model.invoke("hi")
    # Overwrite the entry just written with one naming os.system.
    key = cache._key(dumps([HumanMessage("hi")]), model._get_llm_string())
    crafted = {"__ar__": "dataclass", "t": "os:system", "v": {"command": f"touch {marker}"}}
    cache.store.cache.put("llm:langchain", key, CacheEntry(json.dumps(crafted).encode()), ttl=None)
    with pytest.raises(SerializationError):
        model.invoke("hi")
    assert not marker.exists()
    cache.close()
