"""LangChain calls log each replay decision at DEBUG under agentrewind.*, nothing louder."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from langchain_core.runnables import RunnableLambda

import agentrewind
from agentrewind_langchain.testing import ScriptedChatModel


def test_model_calls_log_executed_then_replayed(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.DEBUG, logger="agentrewind")
    calls: dict[str, int] = {}
    model = ScriptedChatModel(responses=["hello"], counter=calls)
    chain = agentrewind.Middleware(f"sqlite:///{tmp_path / 'runs.db'}").wrap(
        RunnableLambda(lambda text: model.invoke(text).content)
    )
    config = {"configurable": {"thread_id": "t-1"}}
    assert chain.invoke("hi", config) == "hello"
    assert chain.invoke("hi", config) == "hello"
    assert calls["calls"] == 1
    ours = [r for r in caplog.records if r.name.startswith("agentrewind")]
    decisions = [r.getMessage() for r in ours if "llm:" in r.getMessage()]
    assert len(decisions) == 2, decisions
    assert "executes" in decisions[0] and "replayed" in decisions[1], decisions
    assert {r.levelno for r in ours} == {logging.DEBUG}
