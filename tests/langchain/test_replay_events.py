"""astream_events(v2) on a resumed create_agent: replayed calls look like live ones, tagged."""

from __future__ import annotations

import uuid
from collections import defaultdict
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from lc_support import Flaky, contents, make_tools

from agentrewind_langchain import REPLAYED_TAG, Middleware
from agentrewind_langchain.testing import ScriptedChatModel

INPUT = {"messages": [("user", "Check order A-17 and email the customer")]}

# The tool-calling replies carry text too, so a replayed call has several words to stream.
RESPONSES = [
    AIMessage(
        content="Let me look order A-17 up.",
        tool_calls=[{"name": "lookup_order", "args": {"order_id": "A-17"}, "id": "call_lookup"}],
    ),
    AIMessage(
        content="Now I email the customer.",
        tool_calls=[
            {
                "name": "email_customer",
                "args": {"order_id": "A-17", "text": "shipped"},
                "id": "call_email",
            }
        ],
    ),
    "Done: A-17 is paid and the customer was emailed.",
]


def make_agent(flaky: Flaky, counter: dict[str, int]) -> Any:
    from langchain.agents import create_agent

    model = ScriptedChatModel(responses=RESPONSES, counter=counter)
    return create_agent(model, make_tools(flaky))


def replayed(event: dict[str, Any]) -> bool:
    """Both marks of a replayed call: the tag and the metadata entry."""
    tagged = REPLAYED_TAG in event["tags"]
    marked = event["metadata"].get("agentrewind") == "replayed"
    assert tagged == marked, event  # never one without the other
    return tagged


async def test_astream_events_v2_replays_tagged_chunked_events(sqlite_url: str) -> None:
    mw = Middleware(sqlite_url)
    config = {"configurable": {"thread_id": f"events-{uuid.uuid4().hex[:8]}"}}
    flaky, counter = Flaky(), {}
    with pytest.raises(ConnectionError):  # the email tool fails after 2 model calls + lookup
        async for _ in mw.wrap(make_agent(flaky, counter)).astream_events(
            INPUT, config, version="v2"
        ):
            pass
    assert (counter["calls"], flaky.lookups) == (2, 1)

    flaky2, counter2 = Flaky(), {}
    flaky2.fail = False
    agent = mw.wrap(make_agent(flaky2, counter2))
    events = [e async for e in agent.astream_events(INPUT, config, version="v2")]
    assert (counter2["calls"], flaky2.lookups, flaky2.emails) == (1, 0, 1)

    # chat models: group stream and end events by LangChain run, in order of appearance
    streams: dict[str, list[dict[str, Any]]] = defaultdict(list)
    ends: dict[str, dict[str, Any]] = {}
    for e in events:
        if e["event"] == "on_chat_model_stream":
            streams[e["run_id"]].append(e)
        elif e["event"] == "on_chat_model_end":
            ends[e["run_id"]] = e
    assert list(streams) == list(ends) and len(ends) == 3
    first, second, live = ends
    for run_id in (first, second):
        assert replayed(ends[run_id])
        assert all(replayed(e) for e in streams[run_id])
    assert not replayed(ends[live])
    assert not any(replayed(e) for e in streams[live])

    # a replayed call still streams word by word, adding up to the recorded message
    for run_id, reply in ((first, RESPONSES[0]), (second, RESPONSES[1])):
        chunks = [e["data"]["chunk"] for e in streams[run_id]]
        assert len(chunks) > 3
        assert "".join(c.content for c in chunks) == reply.content
        assert [c["name"] for c in chunks[-1].tool_call_chunks] == [reply.tool_calls[0]["name"]]
        output = ends[run_id]["data"]["output"]
        assert output.content == reply.content
        assert [c["id"] for c in output.tool_calls] == [reply.tool_calls[0]["id"]]

    # tools: the lookup is replayed (start and end tagged), the email runs for real
    tool_events = [(e["event"], e["name"], replayed(e)) for e in events if "_tool_" in e["event"]]
    assert tool_events == [
        ("on_tool_start", "lookup_order", True),
        ("on_tool_end", "lookup_order", True),
        ("on_tool_start", "email_customer", False),
        ("on_tool_end", "email_customer", False),
    ]
    lookup_end = next(e for e in events if e["event"] == "on_tool_end")
    assert lookup_end["data"]["output"].content == "order A-17: paid"

    final = events[-1]
    assert final["event"] == "on_chain_end"
    assert contents(final["data"]["output"])[-1] == (
        "ai",
        "Done: A-17 is paid and the customer was emailed.",
        [],
    )
    metrics = mw.metrics(config["configurable"]["thread_id"])
    assert (metrics.replay_hits, metrics.failures) == (3, 1)
    mw.close()
