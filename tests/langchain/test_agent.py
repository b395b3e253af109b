"""create_agent: a rerun with the same thread id replays finished model and tool calls."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, ToolMessage
from lc_support import Flaky, contents, make_agent

from agentrewind_langchain import Middleware

INPUT = {"messages": [("user", "Check order A-17 and email the customer")]}


def reference() -> list[Any]:
    flaky, counter = Flaky(), {}
    flaky.fail = False
    return contents(make_agent(flaky, counter).invoke(INPUT))


def _config() -> dict[str, Any]:
    return {"configurable": {"thread_id": f"order-{uuid.uuid4().hex[:8]}"}}


def test_invoke_rerun_replays_finished_calls(durable_url: str) -> None:
    mw = Middleware(durable_url)
    config = _config()
    flaky, counter = Flaky(), {}
    with pytest.raises(ConnectionError):
        mw.wrap(make_agent(flaky, counter)).invoke(INPUT, config)
    assert counter["calls"] == 2 and flaky.lookups == 1

    flaky2, counter2 = Flaky(), {}  # fresh objects, as after a restart
    flaky2.fail = False
    result = mw.wrap(make_agent(flaky2, counter2)).invoke(INPUT, config)
    assert counter2["calls"] == 1  # only the call that never completed
    assert flaky2.lookups == 0  # the finished tool is not run again
    assert flaky2.emails == 1
    assert contents(result) == reference()

    metrics = mw.metrics(config["configurable"]["thread_id"])
    assert metrics.replay_hits == 3  # 2 model calls + 1 tool call
    assert metrics.tokens_saved == 60  # 2 model calls x 30 tokens
    assert metrics.failures == 1
    mw.close()


async def test_ainvoke_rerun(sqlite_url: str) -> None:
    mw = Middleware(sqlite_url)
    config = _config()
    flaky, counter = Flaky(), {}
    with pytest.raises(ConnectionError):
        await mw.wrap(make_agent(flaky, counter)).ainvoke(INPUT, config)
    flaky2, counter2 = Flaky(), {}
    flaky2.fail = False
    result = await mw.wrap(make_agent(flaky2, counter2)).ainvoke(INPUT, config)
    assert (counter2["calls"], flaky2.lookups, flaky2.emails) == (1, 0, 1)
    assert contents(result) == reference()


@pytest.mark.parametrize("mode", ["messages", "updates"])
def test_stream_rerun(sqlite_url: str, mode: str) -> None:
    mw = Middleware(sqlite_url)
    config = _config()
    flaky, counter = Flaky(), {}
    with pytest.raises(ConnectionError):
        list(mw.wrap(make_agent(flaky, counter)).stream(INPUT, config, stream_mode=mode))
    flaky2, counter2 = Flaky(), {}
    flaky2.fail = False
    parts = list(mw.wrap(make_agent(flaky2, counter2)).stream(INPUT, config, stream_mode=mode))
    assert (counter2["calls"], flaky2.lookups, flaky2.emails) == (1, 0, 1)
    if mode == "messages":
        messages = [m for m, _meta in parts]
        # replayed model calls still stream as chunks; replayed tools still emit messages
        ai_chunks = [m for m in messages if isinstance(m, AIMessageChunk)]
        assert sum(1 for m in ai_chunks if "email_customer" in str(m.tool_call_chunks)) == 1
        assert any(isinstance(m, ToolMessage) and "paid" in m.content for m in messages)
        text = "".join(m.content for m in ai_chunks if isinstance(m.content, str))
        assert "Done: A-17 is paid" in text
    else:
        nodes = [next(iter(p)) for p in parts]
        assert nodes == ["model", "tools", "model", "tools", "model"]
        final = parts[-1]["model"]["messages"][-1]
        assert isinstance(final, AIMessage) and final.content.startswith("Done")


async def test_astream_events_rerun(sqlite_url: str) -> None:
    mw = Middleware(sqlite_url)
    config = _config()
    flaky, counter = Flaky(), {}
    with pytest.raises(ConnectionError):
        async for _ in mw.wrap(make_agent(flaky, counter)).astream_events(INPUT, config):
            pass
    flaky2, counter2 = Flaky(), {}
    flaky2.fail = False
    events = [e async for e in mw.wrap(make_agent(flaky2, counter2)).astream_events(INPUT, config)]
    assert (counter2["calls"], flaky2.lookups, flaky2.emails) == (1, 0, 1)
    ends = [e for e in events if e["event"] == "on_chat_model_end"]
    assert len(ends) == 3  # 2 replayed + 1 live, all visible to the UI
    tool_ends = [e for e in events if e["event"] == "on_tool_end"]
    assert [e["name"] for e in tool_ends] == ["lookup_order", "email_customer"]
    assert "agentrewind:replayed" in tool_ends[0]["tags"]
    assert "agentrewind:replayed" not in tool_ends[1]["tags"]
    tokens = [e for e in events if e["event"] == "on_chat_model_stream"]
    assert len(tokens) > 3  # replayed calls are re-chunked
    assert events[-1]["event"] == "on_chain_end"
    assert events[-1]["data"]["output"]["messages"][-1].content.startswith("Done")
