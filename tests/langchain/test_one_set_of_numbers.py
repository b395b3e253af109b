"""One set of numbers for a LangChain agent and a LangGraph graph, SIGKILLed then resumed.

`runs`, `metrics`, the viewer's JSON API and the OpenTelemetry run span report the same
figures; the killed execution's calls count (its records), and the replays of the resume save
the tokens the scripted model reported when it first answered.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("opentelemetry.sdk")

from langchain.agents import create_agent
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph

import agentrewind
from agentrewind_langchain import Middleware
from agentrewind_langchain.testing import ScriptedChatModel, tool_call
from numbers_support import assert_one_set, die, in_child, spans

pytestmark = pytest.mark.filterwarnings(
    "ignore:This process .* is multi-threaded, use of fork:DeprecationWarning"
)

TOKENS = 30  # each scripted reply reports this many tokens


def _agent(url: str, crash: bool, paid: dict[str, int]) -> Any:
    @tool
    def lookup_order(order_id: str) -> str:
        """Look up an order."""
        return f"order {order_id}: paid"

    @tool
    def email_customer(order_id: str, text: str) -> str:
        """Email the customer."""
        if crash:
            die()
        return f"emailed about {order_id}"

    script = [
        tool_call("lookup_order", {"order_id": "A-17"}),
        tool_call("email_customer", {"order_id": "A-17", "text": "shipped"}),
        "Done: A-17 is paid and the customer was emailed.",
    ]
    model = ScriptedChatModel(responses=script, counter=paid, tokens=TOKENS)
    mw = Middleware(url)
    return mw.wrap(create_agent(model, [lookup_order, email_customer]))


def test_a_killed_then_resumed_agent_has_one_set_of_numbers(
    shared_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = {"configurable": {"thread_id": "agent-1"}}
    ask = {"messages": [("user", "Check order A-17 and email the customer")]}
    assert in_child(lambda: _agent(shared_url, True, {}).invoke(ask, cfg)) == -9
    paid: dict[str, int] = {}
    with spans(monkeypatch) as exporter:
        with pytest.warns(agentrewind.RerunWarning, match="email_customer"):
            _agent(shared_url, False, paid).invoke(ask, cfg)
        assert paid == {"calls": 1}  # only the final answer was paid for again
        # two model calls and the lookup replayed; the email ran again after the kill
        assert_one_set(
            shared_url,
            "agent-1",
            exporter,
            executions=2,
            replay_hits=3,
            tokens_saved=2 * TOKENS,
            reruns=1,
            attempts=1,
            failures=0,
        )


class State(TypedDict):
    topic: str
    notes: Annotated[list[str], operator.add]


def _graph(url: str, crash: bool, paid: dict[str, int]) -> Any:
    model = ScriptedChatModel(responses=["an outline"], counter=paid, tokens=TOKENS)

    @tool
    def publish(text: str) -> str:
        """Publish a post."""
        if crash:
            die()
        return "published"

    def plan(state: State) -> dict[str, Any]:
        return {"notes": [str(model.invoke(f"plan {state['topic']}").content)]}

    def work(state: State) -> dict[str, Any]:
        draft = model.invoke(f"draft {state['topic']}").content
        return {"notes": [publish.invoke({"text": str(draft)})]}

    g = StateGraph(State)
    g.add_node("plan", plan)
    g.add_node("work", work)
    g.add_edge(START, "plan")
    g.add_edge("plan", "work")
    g.add_edge("work", END)
    return Middleware(url).wrap(g.compile())


def test_a_killed_then_resumed_graph_has_one_set_of_numbers(
    shared_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = {"configurable": {"thread_id": "graph-1"}}
    topic = {"topic": "tides", "notes": []}
    assert in_child(lambda: _graph(shared_url, True, {}).invoke(topic, cfg)) == -9
    paid: dict[str, int] = {}
    with spans(monkeypatch) as exporter:
        with pytest.warns(agentrewind.RerunWarning, match="publish"):
            out = _graph(shared_url, False, paid).invoke(topic, cfg)
        assert out["notes"] == ["an outline", "published"] and paid == {}
        assert_one_set(
            shared_url,
            "graph-1",
            exporter,
            executions=2,
            replay_hits=2,  # both model calls
            tokens_saved=2 * TOKENS,
            reruns=1,
            attempts=1,
        )
