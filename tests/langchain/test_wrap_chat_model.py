"""A bare chat model wrapped alone (`middleware.wrap(chat_model)`) is journaled and replayed
like any other wrapped runnable, and served by `cache=["chat:*"]`: invoke and stream, sync and
async (a model counter says what was paid for)."""

from __future__ import annotations

import asyncio
from typing import Any

import agentrewind
from agentrewind_langchain.testing import ScriptedChatModel

REPLY = "one two three"


def cfg(run_id: str) -> Any:
    return {"configurable": {"agentrewind_run_id": run_id}}


def invoke(wrapped: Any, run_id: str) -> str:
    return str(wrapped.invoke("hi", cfg(run_id)).content)


def stream(wrapped: Any, run_id: str) -> str:
    return "".join(str(c.content) for c in wrapped.stream("hi", cfg(run_id)))


def ainvoke(wrapped: Any, run_id: str) -> str:
    async def main() -> str:
        return str((await wrapped.ainvoke("hi", cfg(run_id))).content)

    return asyncio.run(main())


def astream(wrapped: Any, run_id: str) -> str:
    async def main() -> str:
        return "".join([str(c.content) async for c in wrapped.astream("hi", cfg(run_id))])

    return asyncio.run(main())


CALLS = {"invoke": invoke, "stream": stream, "ainvoke": ainvoke, "astream": astream}


def test_each_way_of_calling_is_journaled_and_replayed(durable_url: str) -> None:
    counter: dict[str, int] = {}
    mw = agentrewind.Middleware(durable_url)
    model = mw.wrap(ScriptedChatModel(responses=[REPLY], counter=counter))
    for n, (how, call) in enumerate(CALLS.items(), start=1):
        assert call(model, how) == REPLY
        assert counter == {"calls": n}, how
        steps = mw.store.load_steps(how)
        assert [(s.kind, s.name, s.status) for s in steps] == [
            ("llm", "ScriptedChatModel", "completed")
        ], how
        # The same run again: replayed from its journal, the model is not called.
        assert call(model, how) == REPLY
        assert counter == {"calls": n}, how
    mw.close()


def test_chat_star_serves_every_way_of_calling_from_the_cache(durable_url: str) -> None:
    counter: dict[str, int] = {}
    mw = agentrewind.Middleware(durable_url)
    model = mw.wrap(
        ScriptedChatModel(responses=[REPLY], counter=counter), cache_ttl=3600, cache=["chat:*"]
    )
    assert invoke(model, "first") == REPLY
    assert counter == {"calls": 1}
    for how, call in CALLS.items():  # other run ids: the cache, not the journal
        assert call(model, f"again-{how}") == REPLY, how
        cached = [s.meta.get("cached") for s in mw.store.load_steps(f"again-{how}")]
        assert cached == [True], how
    assert counter == {"calls": 1}
    (stats,) = mw.cache.stats()
    assert (stats.site, stats.entries, stats.hits) == ("llm:ScriptedChatModel", 1, 4)
    # Another prompt pays, once.
    assert str(model.invoke("other", cfg("other")).content) == REPLY
    assert str(model.invoke("other", cfg("other-2")).content) == REPLY
    assert counter == {"calls": 2}
    mw.close()


def test_a_first_stream_is_stored_and_served_to_invoke(sqlite_url: str) -> None:
    counter: dict[str, int] = {}
    mw = agentrewind.Middleware(sqlite_url)
    model = mw.wrap(
        ScriptedChatModel(responses=[REPLY], counter=counter), cache_ttl=3600, cache=["chat:*"]
    )
    chunks = [c.content for c in model.stream("hi", cfg("s"))]
    assert "".join(str(c) for c in chunks) == REPLY and len(chunks) > 1
    assert invoke(model, "i") == REPLY and astream(model, "a") == REPLY
    assert counter == {"calls": 1}
    mw.close()
