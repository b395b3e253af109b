"""Issue 12 item 8: every way of running a wrapped runnable goes through the run and replays.

`stream_events`/`astream_events(version="v3")`, v2 events, `astream_log`, `transform`,
`batch_as_completed` and the graph methods behave as on the unwrapped runnable, and a
rerun with the same id replays the recorded calls. On SQLite and on Redis.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.prompts import ChatPromptTemplate
from langgraph.checkpoint.memory import InMemorySaver
from lc_support import RESPONSES, Flaky, contents, make_agent, make_tools

from agentrewind_langchain import Middleware, RewindRunnable
from agentrewind_langchain.testing import ScriptedChatModel

pytestmark = pytest.mark.filterwarnings(
    "ignore:The v3 streaming protocol:langchain_core._api.beta_decorator.LangChainBetaWarning"
)

INPUT = {"messages": [("user", "Check order A-17 and email the customer")]}


def agent_and_counts() -> tuple[Any, Flaky, dict[str, int]]:
    flaky = Flaky()
    flaky.fail = False
    counter: dict[str, int] = {}
    return make_agent(flaky, counter), flaky, counter


def shape(events: list[Any]) -> list[tuple[str, str]]:
    """(method, event) of each v3 event; text deltas left out (a replay sends one per block)."""
    out = []
    for e in events:
        data = e["params"]["data"]
        name = (data[0] if isinstance(data, tuple) else data).get("event", "")
        if name != "content-block-delta":
            out.append((e["method"], name))
    return out


def test_stream_events_v3_on_a_wrapped_agent(durable_url: str) -> None:
    plain, _, plain_calls = agent_and_counts()
    run = plain.stream_events(INPUT, version="v3")
    plain_events = list(run)
    expected = contents(run.output)

    mw = Middleware(durable_url)
    cfg = {"configurable": {"thread_id": "v3"}}
    seen = []
    for _ in range(2):
        agent, flaky, counter = agent_and_counts()
        run = mw.wrap(agent).stream_events(INPUT, cfg, version="v3")
        events = list(run)
        assert contents(run.output) == expected
        assert shape(events) == shape(plain_events)
        seen.append((counter.get("calls", 0), flaky.lookups, flaky.emails))
    assert seen == [(plain_calls["calls"], 1, 1), (0, 0, 0)]  # the rerun replayed everything
    assert mw.metrics("v3").replay_hits == 5


def test_astream_events_v3_on_a_wrapped_agent(durable_url: str) -> None:
    async def main() -> list[tuple[int, int, list[Any]]]:
        mw = Middleware(durable_url)
        out = []
        for _ in range(2):
            agent, flaky, counter = agent_and_counts()
            wrapped = mw.wrap(agent)
            run = await wrapped.astream_events(
                INPUT, {"configurable": {"thread_id": "av3"}}, version="v3"
            )
            events = [e async for e in run]
            assert events and wrapped.last_run_id == "av3"
            out.append((counter.get("calls", 0), flaky.emails, contents(await run.output())))
        return out

    (calls1, emails1, out1), (calls2, emails2, out2) = asyncio.run(main())
    assert (calls1, emails1, calls2, emails2) == (3, 1, 0, 0)
    assert out1 == out2


def test_v3_through_with_config_and_on_a_copy(durable_url: str) -> None:
    mw = Middleware(durable_url)
    for _ in range(2):
        agent, flaky, counter = agent_and_counts()
        wrapped = mw.wrap(agent)
        bound = wrapped.with_config(configurable={"thread_id": "wc3"})
        run = bound.stream_events(INPUT, version="v3")
        list(run)
        assert run.output is not None and wrapped.last_run_id == "wc3"
    assert counter == {} and flaky.emails == 0  # the second pass replayed
    copied = wrapped.copy()
    assert isinstance(copied, RewindRunnable) and copied.bound is not agent
    assert wrapped.validate() is wrapped  # a method returning the graph itself returns us


@pytest.mark.filterwarnings("ignore:astream_log is deprecated")
def test_astream_events_v2_and_astream_log_replay(durable_url: str) -> None:
    mw = Middleware(durable_url)

    async def events(thread: str) -> tuple[list[str], dict[str, int]]:
        agent, _, counter = agent_and_counts()
        names = [
            e["event"]
            async for e in mw.wrap(agent).astream_events(
                INPUT, {"configurable": {"thread_id": thread}}, version="v2"
            )
        ]
        return names, counter

    async def log(thread: str) -> tuple[int, dict[str, int]]:
        agent, _, counter = agent_and_counts()
        n = 0
        async for _ in mw.wrap(agent).astream_log(INPUT, {"configurable": {"thread_id": thread}}):
            n += 1
        return n, counter

    first, c1 = asyncio.run(events("ev2"))
    second, c2 = asyncio.run(events("ev2"))
    assert c1["calls"] == 3 and c2 == {}
    assert first.count("on_chat_model_end") == second.count("on_chat_model_end") == 3
    assert first.count("on_tool_end") == second.count("on_tool_end") == 2
    n1, l1 = asyncio.run(log("log"))
    n2, l2 = asyncio.run(log("log"))
    assert l1["calls"] == 3 and l2 == {} and n1 > 0 and n2 > 0


def chain(counter: dict[str, int]) -> Any:
    prompt = ChatPromptTemplate.from_messages([("user", "{q}")])
    return prompt | ScriptedChatModel(responses=["a b c"], counter=counter)


def test_transform_and_atransform_run_inside_the_run(durable_url: str) -> None:
    mw = Middleware(durable_url)
    counter: dict[str, int] = {}
    cfg = {"configurable": {"thread_id": "tr"}}
    text = "".join(c.content for c in mw.wrap(chain(counter)).transform(iter([{"q": "x"}]), cfg))
    again = "".join(c.content for c in mw.wrap(chain(counter)).transform(iter([{"q": "x"}]), cfg))

    async def agen() -> Any:
        yield {"q": "x"}

    async def atext() -> str:
        return "".join([c.content async for c in mw.wrap(chain(counter)).atransform(agen(), cfg)])

    assert text == again == asyncio.run(atext()) == "a b c"
    assert counter["calls"] == 1
    assert mw.metrics("tr").replay_hits == 2


def test_batch_as_completed_gives_each_item_its_run(durable_url: str) -> None:
    mw = Middleware(durable_url)
    counter: dict[str, int] = {}
    wrapped = mw.wrap(chain(counter))
    cfg = {"configurable": {"thread_id": "bac"}}
    inputs = [{"q": "1"}, {"q": "2"}]
    first = sorted((i, m.content) for i, m in wrapped.batch_as_completed(inputs, cfg))
    assert wrapped.last_run_ids == ["bac:0", "bac:1"]

    async def abac() -> list[tuple[int, str]]:
        pairs = [(i, m.content) async for i, m in wrapped.abatch_as_completed(inputs, cfg)]
        return sorted(pairs)

    assert asyncio.run(abac()) == first == [(0, "a b c"), (1, "a b c")]
    assert counter["calls"] == 2  # the async pass replayed both items
    assert list(wrapped.batch_as_completed([], cfg)) == []


def test_graph_methods_are_the_wrapped_graphs(durable_url: str) -> None:
    flaky = Flaky()
    flaky.fail = False
    from langchain.agents import create_agent

    agent = create_agent(
        ScriptedChatModel(responses=RESPONSES), make_tools(flaky), checkpointer=InMemorySaver()
    )
    wrapped = Middleware(durable_url).wrap(agent)
    cfg = {"configurable": {"thread_id": "gs"}}
    wrapped.invoke(INPUT, cfg)
    assert contents(wrapped.get_state(cfg).values) == contents(agent.get_state(cfg).values)
    assert len(list(wrapped.get_state_history(cfg))) == len(list(agent.get_state_history(cfg)))
    assert wrapped.get_graph().to_json() == agent.get_graph().to_json()
    assert wrapped.get_input_jsonschema() == agent.get_input_jsonschema()
    assert wrapped.get_output_jsonschema() == agent.get_output_jsonschema()
    assert wrapped.get_context_jsonschema() == agent.get_context_jsonschema()
    assert wrapped.get_name() == agent.get_name() and wrapped.nodes is agent.nodes
