"""RewindSaver under real LangGraph graphs: interrupts, time travel, subgraphs, Send, durability."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, interrupt

from agentrewind_langgraph import RewindSaver
from langgraph_support import State, cfg, line_graph


def test_interrupt_and_resume_in_a_new_saver(saver_url: str) -> None:
    calls: list[str] = []

    def ask(state: State) -> dict[str, Any]:
        calls.append("ask")
        answer = interrupt("approve?")
        return {"items": [f"answer:{answer}"]}

    b = StateGraph(State)
    b.add_node("before", lambda s: calls.append("before") or {"items": ["before"]})
    b.add_node("ask", ask)
    b.add_edge(START, "before")
    b.add_edge("before", "ask")
    b.add_edge("ask", END)
    config = cfg()
    with RewindSaver.from_conn_string(saver_url) as saver:
        out = b.compile(checkpointer=saver).invoke({"items": []}, config)
        assert "__interrupt__" in out
    # A new saver (as a new process would) resumes the paused run.
    with RewindSaver.from_conn_string(saver_url) as saver:
        graph = b.compile(checkpointer=saver)
        assert graph.get_state(config).next == ("ask",)
        out = graph.invoke(Command(resume="yes"), config)
    assert out["items"] == ["before", "answer:yes"]
    assert calls == ["before", "ask", "ask"]  # "before" did not run again


async def test_time_travel_fork_and_resume_from_checkpoint(saver_url: str) -> None:
    async with RewindSaver.from_conn_string(saver_url) as saver:
        graph = line_graph(3).compile(checkpointer=saver)
        config = cfg()
        await graph.ainvoke({"items": []}, config)
        history = [s async for s in graph.aget_state_history(config)]
        assert [len(s.values.get("items", [])) for s in history] == [3, 2, 1, 0, 0]
        after_n0 = next(s for s in history if s.values.get("items") == ["n0"])
        # Fork: rewrite the state after n0, then resume from the fork.
        fork = await graph.aupdate_state(after_n0.config, {"items": ["edited"]})
        out = await graph.ainvoke(None, fork)
        assert out["items"] == ["n0", "edited", "n1", "n2"]
        # Resume from an old checkpoint id replays nothing before it.
        out2 = await graph.ainvoke(None, after_n0.config)
        assert out2["items"] == ["n0", "n1", "n2"]
        states = [s async for s in graph.aget_state_history(config)]
        assert len(states) > len(history)
        parents = {s.config["configurable"]["checkpoint_id"] for s in states}
        for s in states:
            if s.parent_config:
                assert s.parent_config["configurable"]["checkpoint_id"] in parents


def test_subgraph_state_and_time_travel(saver_url: str) -> None:
    class Sub(TypedDict):
        items: Annotated[list[str], operator.add]

    def sub_ask(state: Sub) -> dict[str, Any]:
        return {"items": [f"sub:{interrupt('inner?')}"]}

    sb = StateGraph(Sub)
    sb.add_node("s1", lambda s: {"items": ["s1"]})
    sb.add_node("s2", sub_ask)
    sb.add_edge(START, "s1")
    sb.add_edge("s1", "s2")
    sb.add_edge("s2", END)
    b = StateGraph(State)
    b.add_node("outer", lambda s: {"items": ["outer"]})
    b.add_node("child", sb.compile())
    b.add_edge(START, "outer")
    b.add_edge("outer", "child")
    b.add_edge("child", END)

    def story(saver: Any) -> list[Any]:
        config = cfg()
        graph = b.compile(checkpointer=saver)
        graph.invoke({"items": []}, config)
        state = graph.get_state(config, subgraphs=True)
        sub_state = state.tasks[0].state
        assert sub_state.config["configurable"]["checkpoint_ns"].startswith("child:")
        seen = [sub_state.values["items"], graph.invoke(Command(resume="ok"), config)["items"]]
        # Time travel to the checkpoint before the subgraph ran and run it again.
        before_child = next(s for s in graph.get_state_history(config) if s.next == ("child",))
        graph.invoke(None, before_child.config)
        seen.append(graph.get_state(config, subgraphs=True).tasks[0].state.values["items"])
        seen.append(graph.invoke(Command(resume="again"), config)["items"])
        seen.append(len(list(graph.get_state_history(config))))
        return seen

    with RewindSaver.from_conn_string(saver_url) as saver:
        ours = story(saver)
    assert ours == story(InMemorySaver())
    assert ours[0] == ["outer", "s1"]
    assert ours[1][-1] == "sub:ok" and ours[3][-1] == "sub:again"


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_send_fan_out_and_durability(saver_url: str, durability: str) -> None:
    def fan(state: State) -> list[Send]:
        return [Send("work", {"items": [str(i)]}) for i in range(5)]

    b = StateGraph(State)
    b.add_node("start", lambda s: {"items": ["start"]})
    b.add_node("work", lambda s: {"items": [f"w{s['items'][0]}"]})
    b.add_edge(START, "start")
    b.add_conditional_edges("start", fan, ["work"])
    b.add_edge("work", END)
    config = cfg()
    with RewindSaver.from_conn_string(saver_url) as saver:
        graph = b.compile(checkpointer=saver)
        out = graph.invoke({"items": []}, config, durability=durability)
        assert out["items"] == ["start", "w0", "w1", "w2", "w3", "w4"]
        stored = list(saver.list(config))
        assert len(stored) == (1 if durability == "exit" else 4)
        assert graph.get_state(config).values["items"] == out["items"]


def test_crash_mid_superstep_keeps_finished_task_writes(saver_url: str) -> None:
    runs: dict[str, int] = {"a": 0, "b": 0}
    fail = {"on": True}

    def a(state: State) -> dict[str, Any]:
        runs["a"] += 1
        return {"items": ["a"]}

    def b_(state: State) -> dict[str, Any]:
        runs["b"] += 1
        if fail["on"]:
            raise RuntimeError("boom")
        return {"items": ["b"]}

    g = StateGraph(State)
    g.add_node("a", a)
    g.add_node("b", b_)
    g.add_edge(START, "a")
    g.add_edge(START, "b")
    g.add_edge("a", END)
    g.add_edge("b", END)
    config = cfg()
    with RewindSaver.from_conn_string(saver_url) as saver:
        graph = g.compile(checkpointer=saver)
        with pytest.raises(RuntimeError):
            graph.invoke({"items": []}, config, durability="sync")
        fail["on"] = False
        out = graph.invoke(None, config, durability="sync")
    assert sorted(out["items"]) == ["a", "b"]
    assert runs == {"a": 1, "b": 2}  # a's write was kept, a did not run again
