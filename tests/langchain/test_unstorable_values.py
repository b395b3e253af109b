"""Values the journal cannot store never fail the user's run (issue 12, "Build").

LangChain's other data objects go through its own serializer (`dumpd`, loaded with the
`core` allowlist); a value nothing can store is returned to the caller, logged with the call
key, its type and the fix, and its call runs again on resume; `allow_pickle=True` stores it.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from langchain_core.agents import AgentAction
from langchain_core.messages import HumanMessage
from langchain_core.prompt_values import ChatPromptValue
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool
from pydantic import BaseModel, ConfigDict

import agentrewind
from agentrewind_langchain import Middleware


class Holder(BaseModel):
    """A pydantic model pydantic itself cannot put in JSON (it holds a function)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    fn: Any
    label: str = "h"


def wrapped_tool(mw: Middleware, make: Any, runs: list[int]) -> Any:
    @tool
    def produce(n: int) -> Any:
        """Produce a value."""
        runs.append(n)
        return make()

    return mw.wrap(RunnableLambda(lambda n: produce.invoke({"n": n})))


def test_an_unstorable_value_is_returned_logged_and_re_run(
    durable_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    runs: list[int] = []
    wrapped = wrapped_tool(Middleware(durable_url), lambda: Holder(fn=len), runs)
    cfg = {"configurable": {"thread_id": "unstorable"}}
    with caplog.at_level(logging.WARNING, logger="agentrewind.langchain"):
        first = wrapped.invoke(1, cfg)
        with pytest.warns(agentrewind.RerunWarning, match="could not be written"):
            second = wrapped.invoke(1, cfg)
    assert first.fn is len and second.fn is len
    assert runs == [1, 1]  # not journaled: it runs again on resume
    (message, *_) = [r.getMessage() for r in caplog.records]
    assert "tool:produce:" in message and "test_unstorable_values.Holder" in message
    assert "register_codec" in message and "allow_pickle=True" in message


def test_allow_pickle_stores_it(durable_url: str) -> None:
    runs: list[int] = []
    wrapped = wrapped_tool(Middleware(durable_url, allow_pickle=True), lambda: Holder(fn=len), runs)
    cfg = {"configurable": {"thread_id": "pickled"}}
    assert wrapped.invoke(1, cfg).fn is len
    assert wrapped.invoke(1, cfg).fn is len
    assert runs == [1]


@pytest.mark.parametrize(
    "value",
    [
        ChatPromptValue(messages=[HumanMessage("hi")]),
        AgentAction(tool="search", tool_input={"q": "owls"}, log="thinking"),
    ],
    ids=["prompt-value", "agent-action"],
)
def test_langchain_objects_fall_back_to_langchains_serializer(durable_url: str, value: Any) -> None:
    runs: list[int] = []
    mw = Middleware(durable_url)
    wrapped = wrapped_tool(mw, lambda: value, runs)
    cfg = {"configurable": {"thread_id": "dumpd"}}
    assert wrapped.invoke(1, cfg) == value
    replayed = wrapped.invoke(1, cfg)
    assert replayed == value and type(replayed) is type(value)
    assert runs == [1]
    (step,) = [s for s in mw.store.load_steps("dumpd") if s.status == "completed"]
    assert step.output["__ar__"] == "langchain-dumpd" and step.output["v"]["lc"] == 1
