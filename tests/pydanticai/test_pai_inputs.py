"""pydantic-ai: what each model request and tool call was given is recorded beside its output."""

from __future__ import annotations

import json

import pytest
from pai_flows import call
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import agentrewind
from agentrewind.adapters import resolve_inputs
from agentrewind.cli import main as cli
from agentrewind_pydantic_ai import RewindDurability


def test_a_tool_that_raised_then_a_resume_shows_its_error_and_inputs(
    durable_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    tries: list[str] = []

    def ask(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1].parts[-1]
        if last.part_kind == "user-prompt":
            return ModelResponse(parts=[call("charge", "c1", item=str(last.content))])
        return ModelResponse(parts=[TextPart(f"done: {getattr(last, 'content', '')}")])

    agent = Agent(FunctionModel(ask), name="shop", capabilities=[RewindDurability()])

    @agent.tool_plain
    def charge(item: str) -> str:
        tries.append(item)
        if len(tries) == 1:
            raise TimeoutError(f"gateway timed out on {item}")
        return f"paid {item}"

    mw = agentrewind.Middleware(durable_url)
    with pytest.raises(TimeoutError), mw.run("r"):
        agent.run_sync("apples")
    with mw.run("r"):
        assert agent.run_sync("apples").output == "done: paid apples"
    assert tries == ["apples", "apples"]

    steps = mw.store.load_steps("r")
    found = resolve_inputs(steps, mw.serializer, mw.store.namespace)
    failed = next(s for s in steps if s.status == "failed")
    assert failed.kind == "tool" and "apples" in json.dumps(found[failed.step_id])
    request = next(s for s in steps if s.kind == "llm")
    prompt = found[request.step_id]["messages"]
    assert "apples" in json.dumps(prompt) and found[request.step_id]["identity"]
    last = [s for s in steps if s.kind == "llm"][-1]  # its history: request, tool call, result
    assert len(found[last.step_id]["messages"]) == 3

    assert cli(["--store", durable_url, "show", "r", str(failed.seq), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["meta"]["error"]["message"] == "gateway timed out on apples"
    assert "apples" in json.dumps(shown["inputs"])
    mw.close()
