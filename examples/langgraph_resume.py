"""A LangGraph run that fails part-way and resumes from RewindSaver (offline, no LLM).

Run: python examples/langgraph_resume.py
"""

from __future__ import annotations

import operator
import tempfile
from pathlib import Path
from typing import Annotated, TypedDict

from langgraph.graph import END, START, StateGraph

from agentrewind_langgraph import RewindSaver

calls: list[str] = []
flaky = {"fail": True}


class State(TypedDict):
    steps: Annotated[list[str], operator.add]


def fetch(state: State) -> dict[str, list[str]]:
    calls.append("fetch")
    return {"steps": ["fetched 3 rows"]}


def summarise(state: State) -> dict[str, list[str]]:
    calls.append("summarise")
    if flaky["fail"]:
        raise RuntimeError("the summariser timed out")
    return {"steps": ["summary: 3 rows look fine"]}


builder = StateGraph(State)
builder.add_node("fetch", fetch)
builder.add_node("summarise", summarise)
builder.add_edge(START, "fetch")
builder.add_edge("fetch", "summarise")
builder.add_edge("summarise", END)

url = f"sqlite:///{Path(tempfile.mkdtemp()) / 'runs.db'}"
config = {"configurable": {"thread_id": "order-42"}}
with RewindSaver.from_conn_string(url) as saver:
    graph = builder.compile(checkpointer=saver)
    try:
        graph.invoke({"steps": []}, config)
    except RuntimeError as exc:
        print(f"run 1 failed: {exc}; next node: {graph.get_state(config).next}")
    flaky["fail"] = False
    result = graph.invoke(None, config)  # resume: fetch is not run again
    print("run 2 result:", result["steps"])
    print("node calls:", calls)
    assert calls == ["fetch", "summarise", "summarise"]
