"""Serde codecs for the LlamaIndex values the journal holds (messages, responses, tool outputs).

Each codec stores a pydantic dump of the value and rebuilds it with `model_validate`, so the
default (non-pickle) serializer can record LLM and tool calls. Fields that may hold provider
objects (`ChatResponse.raw`) are kept only when they are JSON data.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.llms.types import ChatMessage, ChatResponse, CompletionResponse
from llama_index.core.tools.types import ToolOutput

from agentrewind import Codec, SerializationError, Serializer, register_codec

__all__ = ["register_llamaindex_codecs"]


def _is_json(value: Any) -> bool:
    if value is None or isinstance(value, bool | int | float | str):
        return True
    if isinstance(value, list):
        return all(_is_json(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json(v) for k, v in value.items())
    return False


def _encode_message(msg: ChatMessage) -> dict[str, Any]:
    return {
        "role": msg.role.value,
        "blocks": [block.model_dump(mode="json") for block in msg.blocks],
        "additional_kwargs": dict(msg.additional_kwargs),
    }


def _decode_message(data: dict[str, Any]) -> ChatMessage:
    return ChatMessage.model_validate(data)


def _encode_response(resp: ChatResponse | CompletionResponse) -> dict[str, Any]:
    data: dict[str, Any] = {
        "delta": resp.delta,
        "additional_kwargs": dict(resp.additional_kwargs),
        "raw": resp.raw if _is_json(resp.raw) else None,
        "logprobs": (
            None
            if resp.logprobs is None
            else [[lp.model_dump(mode="json") for lp in row] for row in resp.logprobs]
        ),
    }
    if isinstance(resp, ChatResponse):
        data["message"] = resp.message
    else:
        data["text"] = resp.text
    return data


def _decode_chat_response(data: dict[str, Any]) -> ChatResponse:
    return ChatResponse.model_validate(data)


def _decode_completion(data: dict[str, Any]) -> CompletionResponse:
    return CompletionResponse.model_validate(data)


def _encode_tool_output(out: ToolOutput) -> dict[str, Any]:
    from ._keys import strip_context

    raw_input = strip_context(out.raw_input)
    return {
        "tool_name": out.tool_name,
        "blocks": [block.model_dump(mode="json") for block in out.blocks],
        "raw_input": raw_input if _is_json(raw_input) else {"repr": repr(raw_input)},
        "raw_output": _storable(out.raw_output),
        "is_error": out.is_error,
    }


def _storable(value: Any) -> Any:
    """A tool may return any object: keep it when serde can store it, else its text."""
    try:
        Serializer().to_tree(value)
    except SerializationError:
        return str(value)
    return value


def _decode_tool_output(data: dict[str, Any]) -> ToolOutput:
    return ToolOutput(
        tool_name=data["tool_name"],
        blocks=data["blocks"] or None,
        raw_input=data["raw_input"],
        raw_output=data["raw_output"],
        is_error=data["is_error"],
    )


_CODECS = (
    Codec(
        "llamaindex.chat_message",
        lambda v: type(v) is ChatMessage,
        _encode_message,
        _decode_message,
    ),
    Codec(
        "llamaindex.chat_response",
        lambda v: type(v) is ChatResponse,
        _encode_response,
        _decode_chat_response,
    ),
    Codec(
        "llamaindex.completion_response",
        lambda v: type(v) is CompletionResponse,
        _encode_response,
        _decode_completion,
    ),
    Codec(
        "llamaindex.tool_output",
        lambda v: type(v) is ToolOutput,
        _encode_tool_output,
        _decode_tool_output,
    ),
)


def register_llamaindex_codecs() -> None:
    """Register the codecs with agentrewind's serializer (idempotent)."""
    for codec in _CODECS:
        register_codec(codec)
