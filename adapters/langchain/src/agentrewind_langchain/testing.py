"""Offline fakes for tests, examples and the demo: a scripted tool-calling chat model.

`ScriptedChatModel` answers by the conversation, not by call order: its k-th response is
used when the input holds k AI messages. A resumed agent therefore gets the same answer
for the same history, however many earlier calls were replayed.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool

__all__ = ["ScriptedChatModel", "order_model", "tool_call"]


def tool_call(name: str, args: dict[str, Any], call_id: str | None = None) -> AIMessage:
    """An AI message asking for one tool call (the id defaults to `call_<name>`)."""
    return AIMessage(
        content="",
        tool_calls=[{"name": name, "args": args, "id": call_id or f"call_{name}"}],
    )


class ScriptedChatModel(BaseChatModel):
    """A chat model that replies from a script and counts its real calls.

    Attributes:
        responses: Reply k is returned when the input holds k AI messages (strings become
            `AIMessage`s); past the end, the last one repeats.
        model: Shown in the model's identity (and so in replay keys).
        counter: A dict whose `"calls"` entry counts real calls (share it to count calls
            across fresh instances).
        delay: Seconds each real call sleeps, standing in for network latency.
        tokens: Total tokens reported in each reply's usage metadata.
    """

    responses: list[Any]
    model: str = "scripted-1"
    counter: Any = None
    delay: float = 0.0
    tokens: int = 30

    @property
    def _llm_type(self) -> str:
        return "scripted-chat-model"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model": self.model}

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[Any, Any]:
        """Bind tools as OpenAI-format schemas (they become part of the call's identity)."""
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def model_post_init(self, context: Any, /) -> None:
        """Give each model its own counter unless one is shared in."""
        if self.counter is None:
            self.counter = {}

    def _reply(self, messages: list[BaseMessage]) -> AIMessage:
        self.counter["calls"] = self.counter.get("calls", 0) + 1
        if self.delay:
            time.sleep(self.delay)
        turn = sum(isinstance(m, AIMessage) for m in messages)
        reply = self.responses[min(turn, len(self.responses) - 1)]
        message = AIMessage(content=reply) if isinstance(reply, str) else reply.model_copy()
        half = self.tokens // 2
        message.usage_metadata = {
            "input_tokens": self.tokens - half,
            "output_tokens": half,
            "total_tokens": self.tokens,
        }
        return message

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._reply(messages))])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        message = self._reply(messages)
        text = message.content if isinstance(message.content, str) else ""
        words = re.findall(r"\S+\s*|\s+", text) or [""]
        for word in words[:-1]:
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=word))
            if run_manager:
                run_manager.on_llm_new_token(word, chunk=chunk)
            yield chunk
        last = AIMessageChunk(
            content=words[-1],
            usage_metadata=message.usage_metadata,
            tool_call_chunks=[
                {
                    "name": c["name"],
                    "args": json.dumps(c["args"]),
                    "id": c["id"],
                    "index": i,
                    "type": "tool_call_chunk",
                }
                for i, c in enumerate(message.tool_calls)
            ],
            chunk_position="last",
        )
        chunk = ChatGenerationChunk(message=last)
        if run_manager:
            run_manager.on_llm_new_token(words[-1], chunk=chunk)
        yield chunk


def order_model(
    counter: dict[str, int], *, delay: float = 0.0, tokens: int = 30
) -> ScriptedChatModel:
    """The model of the order A-17 story told by `agentrewind demo` and the examples.

    It asks for `lookup_order(order_id)`, then `email_customer(order_id, text)`, then gives
    the final answer.

    Args:
        counter: Counts the model's real calls under `"calls"`.
        delay: Seconds each real call takes.
        tokens: Total tokens reported per call.
    """
    return ScriptedChatModel(
        responses=[
            tool_call("lookup_order", {"order_id": "A-17"}),
            tool_call("email_customer", {"order_id": "A-17", "text": "Your order shipped."}),
            "Order A-17 is paid and the customer has been emailed.",
        ],
        counter=counter,
        delay=delay,
        tokens=tokens,
    )
