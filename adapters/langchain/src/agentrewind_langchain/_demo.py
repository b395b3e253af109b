"""The LangChain part of `agentrewind demo`: an agent whose second tool fails, then resumes."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from typing import Any

from langchain_core.tools import tool

from agentrewind import Store

from ._middleware import Middleware
from .testing import order_model

__all__ = ["build_agent", "demo"]

_MAIL_DOWN = {"value": True}


@tool
def lookup_order(order_id: str) -> str:
    """Look up an order by id."""
    time.sleep(0.05)  # a slow API
    return f"order {order_id}: keyboard + mouse, 129.00 EUR, paid"


@tool
def email_customer(order_id: str, text: str) -> str:
    """Email the customer about their order."""
    if _MAIL_DOWN["value"]:
        raise ConnectionError("mail API timed out (simulated)")
    return f"email about {order_id} sent"


def build_agent(counter: dict[str, int], *, delay: float = 0.05) -> Any:
    """A `create_agent` graph over a scripted model: lookup, email, then a final answer."""
    from langchain.agents import create_agent

    model = order_model(counter, delay=delay, tokens=420)
    return create_agent(model, [lookup_order, email_customer])


def _attempt(mw: Middleware, run_id: str, out: Callable[[str], None]) -> tuple[Any, Any]:
    counter: dict[str, int] = {}
    agent = mw.wrap(build_agent(counter))
    config = {"configurable": {"thread_id": run_id}}
    try:
        result = agent.invoke({"messages": [("user", "Check order A-17 and email them")]}, config)
    except ConnectionError as exc:
        out(f"    failed: {exc}  (model called {counter.get('calls', 0)}x)")
        return None, counter
    out(f"    model called {counter.get('calls', 0)}x for real")
    return result, counter


def demo(store: Store, out: Callable[[str], None] = print) -> None:
    """Run the agent twice against `store`: it fails in its second tool, then resumes."""
    if importlib.util.find_spec("langchain") is None:  # the adapter needs langchain-core only
        out("LangChain agent: skipped, it needs `langchain` for create_agent")
        out('    pip install "agentrewind[langchain]"')
        return
    mw = Middleware(store)
    run_id = f"lc-demo-{int(time.time() * 1000)}"
    out(f"LangChain agent (create_agent, offline scripted model), run id {run_id}")
    out("1) first attempt: the email tool fails")
    _MAIL_DOWN["value"] = True
    _attempt(mw, run_id, out)
    out("2) same thread id again: finished model and tool calls replay")
    _MAIL_DOWN["value"] = False
    result, _ = _attempt(mw, run_id, out)
    for step in store.load_steps(run_id):
        out(f"    journal  {step.status:>9}  {step.kind}:{step.name}")
    if result is not None:
        out(f"    answer: {result['messages'][-1].content}")
    m = mw.metrics(run_id)
    out(
        f"metrics: {m.replay_hits} calls replayed, {m.tokens_saved} tokens and "
        f"{m.seconds_saved * 1000:.0f} ms saved, {m.failures} failure(s)"
    )
