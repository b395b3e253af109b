"""A LangGraph graph with RewindSaver: node-level resume plus call-level replay in a node."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph

from agentrewind_langchain import Middleware
from agentrewind_langchain.testing import ScriptedChatModel

RewindSaver = pytest.importorskip("agentrewind_langgraph").RewindSaver


class State(TypedDict):
    topic: str
    notes: Annotated[list[str], operator.add]


def build(calls: dict[str, int], fail: dict[str, bool], checkpointer: Any) -> Any:
    model = ScriptedChatModel(responses=["an outline"], counter=calls)

    @tool
    def fetch(url: str) -> str:
        """Fetch a page."""
        calls["fetch"] = calls.get("fetch", 0) + 1
        return f"page {url}"

    @tool
    def publish(text: str) -> str:
        """Publish a post."""
        if fail["publish"]:
            raise TimeoutError("CMS timed out")
        calls["publish"] = calls.get("publish", 0) + 1
        return "published"

    def plan(state: State) -> dict[str, Any]:
        calls["plan"] = calls.get("plan", 0) + 1
        return {"notes": [str(model.invoke(f"plan {state['topic']}").content)]}

    def work(state: State) -> dict[str, Any]:  # several calls in one node
        calls["work"] = calls.get("work", 0) + 1
        a = model.invoke(f"draft part 1 of {state['topic']}").content
        b = model.invoke(f"draft part 2 of {state['topic']}").content
        page = fetch.invoke({"url": "https://example.org"})
        result = publish.invoke({"text": f"{a} {b} {page}"})
        return {"notes": [result]}

    def finish(state: State) -> dict[str, Any]:
        calls["finish"] = calls.get("finish", 0) + 1
        return {"notes": ["done"]}

    g = StateGraph(State)
    g.add_node("plan", plan)
    g.add_node("work", work)
    g.add_node("finish", finish)
    g.add_edge(START, "plan")
    g.add_edge("plan", "work")
    g.add_edge("work", "finish")
    g.add_edge("finish", END)
    return g.compile(checkpointer=checkpointer)


def test_node_resume_from_saver_and_call_replay_inside_the_node(durable_url: str) -> None:
    mw = Middleware(durable_url)
    config = {"configurable": {"thread_id": "post-1"}}
    fail = {"publish": True}
    with RewindSaver.from_conn_string(durable_url) as saver:
        calls: dict[str, int] = {}
        with pytest.raises(TimeoutError):
            mw.wrap(build(calls, fail, saver)).invoke({"topic": "owls", "notes": []}, config)
        assert (calls["plan"], calls["work"], calls["calls"], calls["fetch"]) == (1, 1, 3, 1)

    fail["publish"] = False
    with RewindSaver.from_conn_string(durable_url) as saver:  # a new saver, as after a restart
        calls2: dict[str, int] = {}
        graph = mw.wrap(build(calls2, fail, saver))
        out = graph.invoke(None, config)  # LangGraph resume: continue the failed superstep
        assert out["notes"] == ["an outline", "published", "done"]
        assert "plan" not in calls2  # node-level: the saver skipped the finished node
        assert calls2["work"] == 1  # the failed node ran again...
        assert calls2.get("calls", 0) == 0  # ...but its two model calls replayed
        assert calls2.get("fetch", 0) == 0  # ...and so did its first tool
        assert (calls2["publish"], calls2["finish"]) == (1, 1)
        assert graph.get_state(config).values["notes"] == out["notes"]  # forwarded attribute
    mw.close()
