"""What the LangGraph tests share: the list-appending state, a fresh thread config, a line graph
and a graph that stops at an interrupt."""

from __future__ import annotations

import operator
import uuid
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt


class State(TypedDict):
    items: Annotated[list[str], operator.add]


def cfg(thread: str | None = None) -> dict[str, Any]:
    """The config of `thread`, or of a new thread."""
    return {"configurable": {"thread_id": thread or uuid.uuid4().hex}}


def line_graph(n: int = 3) -> StateGraph:
    """START -> n0 -> ... -> n{n-1} -> END; node `ni` appends "ni" to `items`."""
    b = StateGraph(State)
    prev = START
    for i in range(n):
        b.add_node(f"n{i}", lambda s, i=i: {"items": [f"n{i}"]})
        b.add_edge(prev, f"n{i}")
        prev = f"n{i}"
    b.add_edge(prev, END)
    return b


def ask_graph(question: Any = "ok?") -> StateGraph:
    """START -> a -> ask -> END: `a` appends "a"; `ask` stops at `interrupt(question)`, then
    appends "answer:<the resume value>"."""

    def ask(state: State) -> dict[str, Any]:
        return {"items": [f"answer:{interrupt(question)}"]}

    b = StateGraph(State)
    b.add_node("a", lambda s: {"items": ["a"]})
    b.add_node("ask", ask)
    b.add_edge(START, "a")
    b.add_edge("a", "ask")
    b.add_edge("ask", END)
    return b
