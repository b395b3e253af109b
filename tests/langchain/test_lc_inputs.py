"""LangChain and LangGraph (via wrap): prompts and tool arguments recorded beside outputs."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool

from agentrewind.adapters import resolve_inputs
from agentrewind.cli import main as cli
from agentrewind_langchain import Middleware
from agentrewind_langchain.testing import ScriptedChatModel


def _found(mw: Middleware, run_id: str) -> list[tuple[Any, Any]]:
    steps = mw.store.load_steps(run_id)
    found = resolve_inputs(steps, mw.serializer, mw.store.namespace)
    return [(s, found[s.step_id]) for s in steps]


def test_a_tool_that_raised_then_a_resume_keeps_its_error_and_every_prompt(
    shared_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    model = ScriptedChatModel(responses=["first answer", "second answer", "third answer"])
    tries: list[str] = []

    @tool
    def lookup(order: str) -> str:
        """Look an order up."""
        tries.append(order)
        if len(tries) == 1:
            raise TimeoutError(f"LLM timed out on {order}")
        return f"{order}: shipped"

    prompts: list[list[BaseMessage]] = []

    def chat(_: Any) -> str:
        history: list[BaseMessage] = [SystemMessage("be brief")]
        for turn in range(3):
            history.append(HumanMessage(f"question {turn}"))
            prompts.append(list(history))
            history.append(model.invoke(history))
        return str(lookup.invoke({"order": "A-17"}))

    mw = Middleware(shared_url)
    config = {"configurable": {"thread_id": "t"}}
    with pytest.raises(TimeoutError):
        mw.wrap(RunnableLambda(chat)).invoke(None, config)
    prompts.clear()
    assert mw.wrap(RunnableLambda(chat)).invoke(None, config) == "A-17: shipped"
    assert model.counter["calls"] == 3 and tries == ["A-17", "A-17"]  # chat calls replayed

    rows = _found(mw, "t")
    chats = [(s, given) for s, given in rows if s.kind == "llm"]
    assert [given["messages"] for _, given in chats] == [mw.serializer.to_tree(p) for p in prompts]
    # each message stored once: the third prompt's record holds its new question only
    assert b"question 0" not in chats[2][0].encode()
    failed, done = [(s, given) for s, given in rows if s.kind == "tool"]
    assert failed[0].status == "failed" and done[0].status == "completed"
    assert failed[1] == done[1] == {"order": "A-17"}

    assert cli(["--store", shared_url, "show", "t", str(failed[0].seq), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["meta"]["error"] == {**shown["meta"]["error"], "message": "LLM timed out on A-17"}
    assert shown["inputs"] == {"order": "A-17"}
    assert cli(["--store", shared_url, "show", "t", str(chats[2][0].seq), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [m["v"]["content"] for m in shown["inputs"]["messages"]] == [
        "be brief", "question 0", "first answer", "question 1", "second answer", "question 2"
    ]  # fmt: skip
    mw.close()


def test_a_langgraph_graph_wrapped_records_its_nodes_prompts(sqlite_url: str) -> None:
    from langgraph.graph import END, START, MessagesState, StateGraph

    model = ScriptedChatModel(responses=["hello there"])

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_edge(START, "agent")
    g.add_edge("agent", END)
    mw = Middleware(sqlite_url)
    graph = mw.wrap(g.compile())
    out = graph.invoke({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "g"}})
    assert isinstance(out["messages"][-1], AIMessage)
    ((step, given),) = _found(mw, "g")
    assert step.name.startswith("ScriptedChatModel@agent")
    assert [m["v"]["content"] for m in given["messages"]] == ["hi"]

    mw_off = Middleware(sqlite_url, record_inputs=False)
    mw_off.wrap(g.compile()).invoke(
        {"messages": [HumanMessage("secret")]}, {"configurable": {"thread_id": "g2"}}
    )
    ((step, given),) = _found(mw_off, "g2")
    assert given is None and b"secret" not in step.encode()
    mw.close()
    mw_off.close()
