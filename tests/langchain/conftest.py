"""Shared pieces for the LangChain adapter tests: stores, a failing agent, call counters."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
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


def _cleanup_redis(url: str, namespace: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"ar:{namespace}:*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.fixture(params=["sqlite", "redis"])
def durable_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A SQLite file or a Redis namespace, fresh for each test."""
    namespace = f"lc-{uuid.uuid4().hex[:10]}"
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}"
        return
    url = request.getfixturevalue("redis_url")
    yield f"{url}?namespace={namespace}"
    _cleanup_redis(url, namespace)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"
