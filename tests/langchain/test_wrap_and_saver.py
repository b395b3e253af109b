"""`middleware.wrap(graph)` and `RewindSaver` under one id: two linked entries every command
reaches (here, where both the LangChain adapter and the LangGraph saver are installed)."""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph

import agentrewind
from agentrewind_langgraph import RewindSaver
from cli_support import batch
from langgraph_support import State, cfg


def test_a_wrapped_graph_and_its_thread_are_two_linked_entries(shared_url: str) -> None:
    url = shared_url

    @agentrewind.step("fetch")
    def fetch(order: str) -> str:
        return f"rows of {order}"

    b = StateGraph(State)
    b.add_node("a", lambda s: {"items": [fetch("42")]})
    b.add_edge(START, "a")
    b.add_edge("a", END)
    mw = agentrewind.Middleware(url)
    try:
        with RewindSaver(url) as saver:
            graph = mw.wrap(b.compile(checkpointer=saver))
            assert graph.invoke({"items": []}, cfg("order-42"))["items"] == ["rows of 42"]
    finally:
        mw.close()
    runs, log_j, log_t, show_t, export_t, rm_t, after = batch(
        ["runs", "--json", "--store", url],
        ["log", "order-42", "--store", url],
        ["log", "langgraph:order-42", "--json", "--store", url],
        ["show", "langgraph:order-42", "2", "--json", "--store", url],
        ["export", "langgraph:order-42", "--store", url],
        ["rm", "langgraph:order-42", "--yes", "--store", url],
        ["runs", "--json", "--store", url],
    )
    listed = {(r["ref"], r["kind"]) for r in runs.ok().json()}  # type: ignore[union-attr]
    assert listed == {("order-42", "journal"), ("langgraph:order-42", "langgraph")}
    assert "its LangGraph thread, `langgraph:order-42`" in log_j.ok().out
    assert "fetch" in log_j.out  # the journal's call
    steps = log_t.ok().json()
    assert isinstance(steps, list) and [s["meta"]["node"] for s in steps][-1] == ["a"]
    assert show_t.ok().json()["output"] == {"items": ["rows of 42"]}  # type: ignore[index]
    doc = export_t.ok().json()
    assert isinstance(doc, dict) and doc["meta"]["source"] == "langgraph"
    assert doc["run_id"] == "order-42" and len(doc["steps"]) == len(steps)
    rm_t.ok()
    left = [(r["ref"], r["kind"]) for r in after.ok().json()]  # type: ignore[union-attr]
    assert left == [("order-42", "journal")]
