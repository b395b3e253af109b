"""Several paid calls inside one LangGraph node: what a resume after SIGKILL pays again.

Each scenario builds a graph whose crashing node makes several model or tool calls (retry
and fallback middleware, summarisation before the model call, a tool that calls an LLM, a
custom node, parallel tool calls). An attempt runs in a forked child that kills itself
(SIGKILL) at the scenario's crash point, with a LangGraph `SqliteSaver` checkpointing every
superstep (`durability="sync"`). The parent then resumes the thread (`invoke(None)`) with
fresh objects, once with the `SqliteSaver` alone and once with the same graph wrapped by
agentrewind as well, and counts the model requests and tool executions the resume pays.

Used by `test_multicall_resume.py` (asserts the counts) and `benchmarks/langchain_multicall.py`
(prints the table).
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import operator
import os
import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain.agents import create_agent
from langchain.agents.middleware import (
    AgentMiddleware,
    ModelFallbackMiddleware,
    ModelRetryMiddleware,
    SummarizationMiddleware,
)
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from agentrewind_langchain import Middleware
from agentrewind_langchain.testing import ScriptedChatModel, tool_call

__all__ = ["SCENARIOS", "Counts", "Scenario", "measure"]


class Calls:
    """Model requests and tool executions of one process; `crash` arms the kill point."""

    def __init__(self, crash: bool) -> None:
        self.crash = crash
        self.model: dict[str, int] = {}  # ScriptedChatModel counters share this dict
        self.tools = 0

    @property
    def models(self) -> int:
        return self.model.get("calls", 0)

    def die(self) -> None:
        """The process is killed here (the crashing attempt only)."""
        if self.crash:
            os.kill(os.getpid(), signal.SIGKILL)


class FlakyModel(ScriptedChatModel):
    """A scripted model whose first `failures` requests of a conversation's first turn fail.

    Each failed request counts as a request; later turns always succeed.
    """

    failures: int = 0

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        first_turn = not any(isinstance(m, AIMessage) for m in messages)
        if first_turn and self.failures:
            self.counter["calls"] = self.counter.get("calls", 0) + 1
            self.failures -= 1
            raise ConnectionError("provider unavailable")
        return super()._generate(messages, *args, **kwargs)


class KillAfterModel(AgentMiddleware):
    """Outermost model hook: the process dies after the node's model call returned."""

    def __init__(self, calls: Calls) -> None:
        super().__init__()
        self.calls = calls

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        response = handler(request)
        self.calls.die()
        return response


ANSWER = "All done."
ASK = [("user", "Look up order A-17")]


def _lookup(calls: Calls) -> Any:
    @tool
    def lookup_order(order_id: str) -> str:
        """Look up an order."""
        calls.tools += 1
        return f"order {order_id}: paid"

    return lookup_order


def retry(calls: Calls) -> Any:
    model = FlakyModel(
        responses=[tool_call("lookup_order", {"order_id": "A-17"}), ANSWER],
        counter=calls.model,
        failures=2,
    )
    hooks = [KillAfterModel(calls), ModelRetryMiddleware(max_retries=2, initial_delay=0.0)]
    return create_agent(model, [_lookup(calls)], middleware=hooks)


def fallback(calls: Calls) -> Any:
    primary = FlakyModel(responses=[ANSWER], counter=calls.model, failures=99, model="primary")
    backup = ScriptedChatModel(
        responses=[tool_call("lookup_order", {"order_id": "A-17"}), ANSWER],
        counter=calls.model,
        model="backup",
    )
    hooks = [KillAfterModel(calls), ModelFallbackMiddleware(backup)]
    return create_agent(primary, [_lookup(calls)], middleware=hooks)


def summarise(calls: Calls) -> Any:
    summariser = ScriptedChatModel(responses=["Summary of the talk."], counter=calls.model)
    model = ScriptedChatModel(
        responses=[tool_call("lookup_order", {"order_id": "A-17"}), ANSWER], counter=calls.model
    )
    hooks = [
        KillAfterModel(calls),
        SummarizationMiddleware(summariser, trigger=("messages", 4), keep=("messages", 2)),
    ]
    return create_agent(model, [_lookup(calls)], middleware=hooks)


SUMMARY_INPUT = [("user", f"message {i}") for i in range(5)] + ASK


def llm_tool(calls: Calls) -> Any:
    writer = ScriptedChatModel(responses=["a draft"], counter=calls.model, model="writer")
    critic = ScriptedChatModel(responses=["looks fine"], counter=calls.model, model="critic")

    @tool
    def write_report(topic: str) -> str:
        """Write a report with an LLM, have it reviewed, then file it."""
        calls.tools += 1
        draft = writer.invoke(f"draft about {topic}").content
        review = critic.invoke(f"review: {draft}").content
        calls.die()  # dies while filing the report
        return f"{draft} ({review})"

    model = ScriptedChatModel(
        responses=[tool_call("write_report", {"topic": "A-17"}), ANSWER], counter=calls.model
    )
    return create_agent(model, [write_report])


class Post(TypedDict):
    topic: str
    notes: Annotated[list[str], operator.add]


def node(calls: Calls) -> Any:
    model = ScriptedChatModel(responses=["text"], counter=calls.model)

    @tool
    def fetch(url: str) -> str:
        """Fetch a page."""
        calls.tools += 1
        return f"page {url}"

    @tool
    def publish(text: str) -> str:
        """Publish."""
        calls.tools += 1
        calls.die()
        return "published"

    def work(state: Post) -> dict[str, Any]:
        summary = model.invoke(f"summarise {state['topic']}").content
        draft = model.invoke(f"draft from {summary}").content
        page = fetch.invoke({"url": "https://example.org"})
        return {"notes": [publish.invoke({"text": f"{draft} {page}"})]}

    g = StateGraph(Post)
    g.add_node("work", work)
    g.add_edge(START, "work")
    g.add_edge("work", END)
    return g


def parallel(calls: Calls) -> Any:
    helper = ScriptedChatModel(responses=["notes"], counter=calls.model, model="helper")

    @tool
    def research(topic: str) -> str:
        """Research with an LLM."""
        calls.tools += 1
        return str(helper.invoke(f"research {topic}").content)

    @tool
    def charge(amount: int) -> str:
        """Charge a card (slow: `research` has finished when it dies)."""
        calls.tools += 1
        if calls.crash:
            time.sleep(0.5)
        calls.die()
        return "charged"

    both = AIMessage(
        content="",
        tool_calls=[
            {"name": "research", "args": {"topic": "A-17"}, "id": "c1"},
            {"name": "charge", "args": {"amount": 5}, "id": "c2"},
        ],
    )
    model = ScriptedChatModel(responses=[both, ANSWER], counter=calls.model)
    return create_agent(model, [research, charge])


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One crash scenario: how to build it, its input, and where it dies."""

    name: str
    build: Callable[[Calls], Any]
    input: Any
    dies: str


SCENARIOS = [
    Scenario("retry", retry, {"messages": ASK}, "after 2 failed attempts and 1 success"),
    Scenario("fallback", fallback, {"messages": ASK}, "after the primary failed, backup answered"),
    Scenario("summarise", summarise, {"messages": SUMMARY_INPUT}, "after summary + model call"),
    Scenario("llm-tool", llm_tool, {"messages": ASK}, "in a tool, after its 2 LLM calls"),
    Scenario("node", node, {"topic": "owls", "notes": []}, "in the 2nd tool, after 2 LLM calls"),
    Scenario("parallel", parallel, {"messages": ASK}, "in tool 2 of 2 parallel tool calls"),
]


@dataclasses.dataclass(frozen=True)
class Counts:
    """Model requests and tool executions a resume paid, and what it returned."""

    models: int
    tools: int
    result: Any


def _compile(scenario: Scenario, calls: Calls, saver: Any) -> Any:
    graph = scenario.build(calls)
    if isinstance(graph, StateGraph):
        return graph.compile(checkpointer=saver)
    graph.checkpointer = saver
    return graph


def _attempt(scenario: Scenario, db: str, journal: str | None, crash: bool) -> Counts:
    calls = Calls(crash)
    conn = sqlite3.connect(db, check_same_thread=False)
    try:
        graph = _compile(scenario, calls, SqliteSaver(conn))
        runnable = graph if journal is None else Middleware(journal).wrap(graph)
        cfg = {"configurable": {"thread_id": scenario.name}}
        result = runnable.invoke(None if not crash else scenario.input, cfg, durability="sync")
    finally:
        conn.close()
    return Counts(calls.models, calls.tools, result)


def _crash_child(scenario_name: str, db: str, journal: str | None) -> None:
    scenario = next(s for s in SCENARIOS if s.name == scenario_name)
    _attempt(scenario, db, journal, crash=True)
    os._exit(3)  # the scenario did not reach its crash point


def measure(scenario: Scenario, workdir: Path, journal: str | None, tag: str = "") -> Counts:
    """Crash the scenario in a child process, then resume it here; what did the resume pay?

    Args:
        scenario: The scenario.
        workdir: A fresh directory for the `SqliteSaver` database.
        journal: agentrewind store URL, or None for the `SqliteSaver` alone.
        tag: Names this measurement's `SqliteSaver` database (one per measurement).
    """
    db = str(workdir / f"{scenario.name}-{'ar' if journal else 'lg'}{tag}.db")
    child = multiprocessing.get_context("fork").Process(
        target=_crash_child, args=(scenario.name, db, journal)
    )
    child.start()
    child.join(120)
    if child.exitcode != -signal.SIGKILL:
        raise RuntimeError(f"{scenario.name}: the crashing attempt exited with {child.exitcode}")
    return _attempt(scenario, db, journal, crash=False)


def clean_run(scenario: Scenario, workdir: Path) -> Counts:
    """The scenario run once without a crash, with the `SqliteSaver` alone."""
    db = str(workdir / f"{scenario.name}-clean.db")
    calls = Calls(crash=False)
    conn = sqlite3.connect(db, check_same_thread=False)
    try:
        graph = _compile(scenario, calls, SqliteSaver(conn))
        cfg = {"configurable": {"thread_id": scenario.name}}
        result = graph.invoke(scenario.input, cfg, durability="sync")
    finally:
        conn.close()
    return Counts(calls.models, calls.tools, result)
