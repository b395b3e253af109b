"""`create_agent` killed (SIGKILL) inside a tool, resumed in another process, on both stores.

Each attempt that crashes runs in a forked child that kills itself inside the email tool;
this process then resumes the same run id with fresh objects and must return what a run
that never crashed returns, paying only for the calls that had not finished. Covered:
`invoke`, `stream`, `ainvoke`, `RewindAgentMiddleware`, parallel tool calls and structured
output.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import time
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.structured_output import ToolStrategy
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from lc_support import contents
from pydantic import BaseModel

import agentrewind
from agentrewind_langchain import Middleware, RewindAgentMiddleware
from agentrewind_langchain.testing import ScriptedChatModel, tool_call

pytestmark = pytest.mark.filterwarnings(
    "ignore:This process .* is multi-threaded, use of fork:DeprecationWarning"
)

INPUT = {"messages": [("user", "Check order A-17 and email the customer")]}


class Report(BaseModel):
    """What the agent reports back."""

    order_id: str
    emailed: bool


LOOKUP = tool_call("lookup_order", {"order_id": "A-17"})
EMAIL = tool_call("email_customer", {"order_id": "A-17", "text": "shipped"})
BOTH = AIMessage(content="", tool_calls=[*LOOKUP.tool_calls, *EMAIL.tool_calls])
SCRIPTS = {
    "sequential": [LOOKUP, EMAIL, "Done: A-17 is paid and the customer was emailed."],
    "parallel": [BOTH, "Done: A-17 is paid and the customer was emailed."],
    "structured": [LOOKUP, EMAIL, tool_call("Report", {"order_id": "A-17", "emailed": True})],
}
MODES = {  # mode: (script, how the agent is run)
    "invoke": ("sequential", "invoke"),
    "stream": ("sequential", "stream"),
    "ainvoke": ("sequential", "ainvoke"),
    "agent-middleware": ("sequential", "invoke"),
    "parallel": ("parallel", "invoke"),
    "structured": ("structured", "invoke"),
}


class World:
    """Counts what one process paid; `crash` kills it inside the email tool."""

    def __init__(self, crash: bool) -> None:
        self.crash = crash
        self.model: dict[str, int] = {}
        self.lookups = 0
        self.emails = 0

    def tools(self) -> list[Any]:
        @tool
        def lookup_order(order_id: str) -> str:
            """Look up an order."""
            self.lookups += 1
            return f"order {order_id}: paid"

        @tool
        def email_customer(order_id: str, text: str) -> str:
            """Email the customer."""
            if self.crash:
                time.sleep(0.3)  # in the parallel case, lookup_order has finished by now
                os.kill(os.getpid(), signal.SIGKILL)
            self.emails += 1
            return f"emailed about {order_id}"

        return [lookup_order, email_customer]


def agent_for(mode: str, url: str | None, world: World) -> Any:
    script = MODES[mode][0]
    model = ScriptedChatModel(responses=SCRIPTS[script], counter=world.model)
    kwargs: dict[str, Any] = {}
    if script == "structured":
        kwargs["response_format"] = ToolStrategy(Report)
    if mode == "agent-middleware":
        kwargs["middleware"] = [RewindAgentMiddleware(url)] if url else []
        return create_agent(model, world.tools(), **kwargs)
    agent = create_agent(model, world.tools(), **kwargs)
    return agent if url is None else Middleware(url).wrap(agent)


def run(mode: str, url: str | None, world: World, run_id: str) -> Any:
    agent = agent_for(mode, url, world)
    cfg = {"configurable": {"thread_id": run_id}}
    how = MODES[mode][1]
    if how == "stream":
        return list(agent.stream(INPUT, cfg, stream_mode="values"))[-1]
    if how == "ainvoke":
        return asyncio.run(agent.ainvoke(INPUT, cfg))
    return agent.invoke(INPUT, cfg)


def _crash(mode: str, url: str, run_id: str) -> None:
    run(mode, url, World(crash=True), run_id)
    os._exit(3)  # never reached the kill


def outcome(result: dict[str, Any]) -> tuple[Any, Any]:
    return contents(result), result.get("structured_response")


@pytest.mark.parametrize("mode", list(MODES))
def test_killed_inside_a_tool_then_resumed(durable_url: str, mode: str) -> None:
    clean_world = World(crash=False)
    clean = run(mode, None, clean_world, "clean")

    run_id = f"crash-{mode}"
    child = multiprocessing.get_context("fork").Process(
        target=_crash, args=(mode, durable_url, run_id)
    )
    child.start()
    child.join(120)
    assert child.exitcode == -signal.SIGKILL

    world = World(crash=False)
    with pytest.warns(agentrewind.RerunWarning, match="email_customer"):  # it may email twice
        resumed = run(mode, durable_url, world, run_id)
    assert outcome(resumed) == outcome(clean)
    # only the answer after the email is a new model call; the lookup replayed; the email
    # tool, killed while running, ran again (at least once)
    assert (world.model.get("calls", 0), world.lookups, world.emails) == (1, 0, 1)
    assert clean_world.model["calls"] == len(SCRIPTS[MODES[mode][0]])
    if mode == "structured":
        assert resumed["structured_response"] == Report(order_id="A-17", emailed=True)
