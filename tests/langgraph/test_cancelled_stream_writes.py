"""A stream closed early keeps the writes of the tasks that finished (issue 25).

Found by `upstream-langgraph` (LangGraph's `test_cancel_graph_astream`, on PostgreSQL only):
closing an `astream` after the first chunk cancels the graph's pending work, including the
saver's write of the finished task's pending writes. On the thread-backed stores that write
completes on its thread; on PostgreSQL it ran on the cancelled task itself and was rolled
back, so the next `aget_state` lost the finished task's output (or the closed stream hung).

PostgreSQL only: on SQLite the same test fails now and then under load (about 1 run in 8 on
a busy two-core machine; LangGraph's own test passed there in both full runs), for a reason
not found yet.
"""

from __future__ import annotations

import asyncio
import operator
from contextlib import aclosing
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import START, StateGraph

from agentrewind_langgraph import RewindSaver
from langgraph_support import cfg


class Total(TypedDict):
    value: Annotated[int, operator.add]


@pytest.mark.parametrize(
    "saver_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
async def test_a_closed_stream_keeps_the_finished_tasks_writes(saver_url: str) -> None:
    cancelled: list[bool] = []

    async def quick(state: Total) -> dict[str, Any]:
        await asyncio.sleep(0.2)
        return {"value": 2}

    async def slow(state: Total) -> dict[str, Any]:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return {"value": 100}

    builder = StateGraph(Total)
    builder.add_node("quick", quick)
    builder.add_node("slow", slow)
    builder.add_edge(START, "quick")
    builder.add_edge(START, "slow")
    config = cfg()
    async with RewindSaver(saver_url) as saver:
        graph = builder.compile(checkpointer=saver)
        async with aclosing(graph.astream({"value": 1}, config)) as stream:
            async for chunk in stream:
                assert chunk == {"quick": {"value": 2}}
                break
        assert cancelled == [True]
        state = await graph.aget_state(config)
    assert state.values == {"value": 3}  # the input and the finished task's write
    assert state.next == ("slow",)
