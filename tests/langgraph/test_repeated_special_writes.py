"""Two interrupts in one node (issue 25, found by `upstream-langgraph`).

A node that calls `interrupt()` twice, or a functional task resumed twice, hands the saver one
`put_writes` call holding the same special channel (`__interrupt__`, `__resume__`) twice.
Special writes replace: the last one is the task's write, as LangGraph's own savers keep it.
On PostgreSQL the two rows went into one upsert and the server refused the whole write
(`ON CONFLICT DO UPDATE command cannot affect row a second time`): LangGraph's tests of
multiple interrupts failed on RewindSaver over PostgreSQL only.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from agentrewind_langgraph import RewindSaver
from langgraph_support import cfg

INTERRUPT = "__interrupt__"  # LangGraph's special channel (its constant is private since 1.0)


class Answers(TypedDict):
    answers: Annotated[list[str], operator.add]


def _graph(saver: RewindSaver) -> Any:
    def ask(state: Answers) -> dict[str, Any]:
        first = interrupt("first?")
        second = interrupt("second?")
        return {"answers": [first, second]}

    g = StateGraph(Answers)
    g.add_node("ask", ask)
    g.add_edge(START, "ask")
    g.add_edge("ask", END)
    return g.compile(checkpointer=saver)


def test_a_special_channel_written_twice_in_one_call_keeps_the_last(
    saver_url_with_cluster: str,
) -> None:
    with RewindSaver(saver_url_with_cluster) as saver:
        config = saver.put(
            {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, empty_checkpoint(), {}, {}
        )
        saver.put_writes(config, [(INTERRUPT, "one"), ("x", 1), (INTERRUPT, "two")], "task")
        stored = saver.get_tuple(config)
    assert stored is not None
    assert sorted((t, c, v) for t, c, v in stored.pending_writes or []) == [
        ("task", INTERRUPT, "two"),
        ("task", "x", 1),
    ]


@pytest.mark.parametrize("async_api", [False, True])
async def test_two_interrupts_in_one_node_resume_in_turn(
    saver_url_with_cluster: str, async_api: bool
) -> None:
    config = cfg()
    async with RewindSaver(saver_url_with_cluster) as saver:
        graph = _graph(saver)
        steps = [{"answers": []}, Command(resume="Ada"), Command(resume="Lovelace")]
        outs = []
        for step in steps:
            outs.append(
                await graph.ainvoke(step, config, durability="sync")
                if async_api
                else graph.invoke(step, config, durability="sync")
            )
    asked = [[i.value for i in out.get("__interrupt__", [])] for out in outs]
    assert asked == [["first?"], ["second?"], []]
    assert outs[-1]["answers"] == ["Ada", "Lovelace"]
