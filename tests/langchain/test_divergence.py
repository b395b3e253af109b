"""A changed prompt between runs runs the changed call; strict=True raises DivergenceError."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda

from agentrewind import DivergenceError, DivergenceWarning
from agentrewind_langchain import Middleware
from agentrewind_langchain.testing import ScriptedChatModel


def two_calls(prompt: str, counter: dict[str, int]) -> Any:
    """Two model calls; the second prompt is what changes between runs."""
    model = ScriptedChatModel(responses=["reply"], counter=counter)
    template = ChatPromptTemplate.from_messages([("user", prompt)])

    def body(topic: str) -> list[str]:
        first = model.invoke(f"summarise {topic}").content
        second = (template | model).invoke({"topic": topic}).content
        return [str(first), str(second)]

    return RunnableLambda(body)


def test_changed_prompt_runs_again_and_warns(durable_url: str) -> None:
    mw = Middleware(durable_url)
    cfg = {"configurable": {"thread_id": "d1"}}
    c1: dict[str, int] = {}
    mw.wrap(two_calls("Write about {topic}", c1)).invoke("owls", cfg)
    assert c1["calls"] == 2

    c2: dict[str, int] = {}
    with pytest.warns(DivergenceWarning, match="diverged"):
        mw.wrap(two_calls("Write a poem about {topic}", c2)).invoke("owls", cfg)
    assert c2["calls"] == 1  # the unchanged call replayed, the changed one ran for real
    completed = [s for s in mw.store.load_steps("d1") if s.status == "completed"]
    assert len(completed) == 3  # the old recording is kept, the new call added beside it
    mw.close()


def test_strict_raises_divergence_error(sqlite_url: str) -> None:
    mw = Middleware(sqlite_url, strict=True)
    cfg = {"configurable": {"thread_id": "d2"}}
    mw.wrap(two_calls("Write about {topic}", {})).invoke("owls", cfg)
    c2: dict[str, int] = {}
    with pytest.raises(DivergenceError):
        mw.wrap(two_calls("Write a poem about {topic}", c2)).invoke("owls", cfg)
    assert c2.get("calls", 0) == 0  # nothing ran: the old result was never handed out either


def test_changed_model_params_are_a_different_call(sqlite_url: str) -> None:
    mw = Middleware(sqlite_url)
    cfg = {"configurable": {"thread_id": "d3"}}
    counter: dict[str, int] = {}
    small = ScriptedChatModel(responses=["small"], model="small", counter=counter)
    big = ScriptedChatModel(responses=["big"], model="big", counter=counter)
    assert mw.wrap(small).invoke("hi", cfg).content == "small"
    with pytest.warns(DivergenceWarning):
        assert mw.wrap(big).invoke("hi", cfg).content == "big"  # never the old result
    with pytest.warns(DivergenceWarning):
        assert mw.wrap(small.bind(stop=["x"])).invoke("hi", cfg).content == "small"
    assert counter["calls"] == 3
