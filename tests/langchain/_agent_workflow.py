"""Child process for test_workflows.py: a LangChain agent and a LangGraph graph registered as
workflows; `run` is SIGKILLed inside a tool (or node), `recover` finishes what crashed.

Usage: python _agent_workflow.py URL RUN_ID run|recover agent|graph
Prints one JSON line of what this process paid (model calls, tool calls) and recovered.
"""

from __future__ import annotations

import json
import operator
import os
import signal
import sys
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from lc_support import Flaky, contents, make_agent

from agentrewind_langchain import Middleware
from agentrewind_langgraph import RewindSaver

INPUT = {"messages": [("user", "Check order A-17 and email the customer")]}


class State(TypedDict):
    done: Annotated[list[str], operator.add]


def main() -> None:
    url, run_id, mode, kind = sys.argv[1:5]
    flaky = Flaky()
    flaky.fail = False
    counter: dict[str, int] = {}
    mw = Middleware(url)
    if kind == "agent":
        agent = make_agent(flaky, counter)
        email = agent.nodes["tools"].bound.tools_by_name["email_customer"]
        original = email.func

        def email_then_maybe_die(order_id: str, text: str) -> str:
            if mode == "run":
                os.kill(os.getpid(), signal.SIGKILL)  # dies inside the tool call
            return original(order_id, text)

        email.func = email_then_maybe_die
        wf = mw.workflow("support-agent", mw.wrap(agent))
    else:
        paid: dict[str, int] = {}

        def node(name: str) -> Any:
            def run(state: State) -> dict[str, list[str]]:
                paid[name] = paid.get(name, 0) + 1
                if name == "b" and mode == "run":
                    os.kill(os.getpid(), signal.SIGKILL)  # dies inside node b
                return {"done": [name]}

            return run

        builder = StateGraph(State)
        for name in "abc":
            builder.add_node(name, node(name))
        builder.add_edge(START, "a")
        builder.add_edge("a", "b")
        builder.add_edge("b", "c")
        builder.add_edge("c", END)
        saver = RewindSaver(mw.store)
        wf = mw.workflow("pipeline", builder.compile(checkpointer=saver))
        counter = paid
    if mode == "run":
        if kind == "agent":
            wf.run(INPUT, run_id=run_id)
        else:  # each superstep's checkpoint committed before the next node starts
            wf.run({"done": []}, None, run_id=run_id, durability="sync")
        return
    report = mw.recover()
    outcome = [(o.run_id, o.workflow, o.outcome) for o in report.outcomes]
    result = report.outcomes[0].result if report.outcomes else None
    print(
        json.dumps(
            {
                "outcomes": outcome,
                "model_calls": counter.get("calls", 0),
                "lookups": flaky.lookups,
                "emails": flaky.emails,
                "paid": counter,
                "result": contents(result) if kind == "agent" and result else result,
            }
        )
    )


if __name__ == "__main__":
    main()
