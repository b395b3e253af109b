"""Shared pieces of the LangChain tests: a flaky tool, a scripted agent, result contents."""

from __future__ import annotations

from typing import Any

from langchain_core.tools import tool

from agentrewind_langchain.testing import ScriptedChatModel, tool_call


class Flaky:
    """Counts tool executions; `fail` makes the email tool raise."""

    def __init__(self) -> None:
        self.fail = True
        self.lookups = 0
        self.emails = 0


def make_tools(flaky: Flaky) -> list[Any]:
    @tool
    def lookup_order(order_id: str) -> str:
        """Look up an order."""
        flaky.lookups += 1
        return f"order {order_id}: paid"

    @tool
    def email_customer(order_id: str, text: str) -> str:
        """Email the customer."""
        if flaky.fail:
            raise ConnectionError("mail API down")
        flaky.emails += 1
        return f"emailed about {order_id}"

    return [lookup_order, email_customer]


RESPONSES = [
    tool_call("lookup_order", {"order_id": "A-17"}),
    tool_call("email_customer", {"order_id": "A-17", "text": "shipped"}),
    "Done: A-17 is paid and the customer was emailed.",
]


def make_agent(flaky: Flaky, counter: dict[str, int], **model_kw: Any) -> Any:
    from langchain.agents import create_agent

    model = ScriptedChatModel(responses=RESPONSES, counter=counter, **model_kw)
    return create_agent(model, make_tools(flaky))


def contents(result: dict[str, Any]) -> list[tuple[str, Any]]:
    """What a run produced, without the random ids."""
    out = []
    for m in result["messages"]:
        calls = [(c["name"], c["args"]) for c in getattr(m, "tool_calls", None) or []]
        out.append((m.type, m.content, calls))
    return out
