"""LlamaIndex: chat messages, completion prompts and tool arguments recorded beside outputs."""

from __future__ import annotations

import json
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool

from agentrewind.adapters import resolve_inputs
from agentrewind.cli import main as cli
from agentrewind_llamaindex import Middleware, install_call_hooks


def _answer(messages: Any, **kwargs: Any) -> ChatMessage:
    return ChatMessage(role="assistant", content=f"re: {messages[-1].content}")


def _text(message: dict[str, Any]) -> str:
    return "".join(b["text"] for b in message["blocks"] if b["block_type"] == "text")


async def test_a_tool_that_raised_then_a_resume_keeps_its_error_and_the_prompts(
    shared_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    install_call_hooks()
    tries: list[str] = []

    def lookup(order: str) -> str:
        """Look an order up."""
        tries.append(order)
        if len(tries) == 1:
            raise TimeoutError(f"timed out on {order}")
        return f"{order}: shipped"

    tool = FunctionTool.from_defaults(lookup)

    async def chat(mw: Middleware) -> None:
        llm = MockFunctionCallingLLM(response_generator=_answer)
        async with mw.run("li"):
            history = [ChatMessage(role="system", content="be brief")]
            for turn in range(3):
                history.append(ChatMessage(role="user", content=f"question {turn}"))
                history.append((await llm.achat(list(history))).message)
            await llm.acomplete("summarise the order")
            await tool.acall(order="A-17")

    mw = Middleware(shared_url)
    with pytest.raises(TimeoutError):
        await chat(mw)
    await chat(mw)
    assert tries == ["A-17", "A-17"]

    steps = mw.store.load_steps("li")
    found = resolve_inputs(steps, mw.serializer, mw.store.namespace)
    chats = [s for s in steps if s.kind == "llm" and "prompt" in s.meta]
    contents = [[_text(m) for m in found[s.step_id]["messages"]] for s in chats]
    assert contents[-1] == [
        "be brief", "question 0", "re: question 0", "question 1", "re: question 1", "question 2"
    ]  # fmt: skip
    assert b"question 0" not in chats[-1].encode()  # stored once, in the first prompt
    (completion,) = [s for s in steps if s.kind == "llm" and "prompt" not in s.meta]
    assert "summarise the order" in json.dumps(found[completion.step_id])
    failed = next(s for s in steps if s.status == "failed")
    assert failed.kind == "tool" and found[failed.step_id]["kwargs"] == {"order": "A-17"}

    assert cli(["--store", shared_url, "show", "li", str(failed.seq), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["meta"]["error"]["message"] == "timed out on A-17"
    assert shown["inputs"]["kwargs"] == {"order": "A-17"}
    mw.close()
