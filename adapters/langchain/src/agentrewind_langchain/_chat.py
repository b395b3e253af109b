"""Chat calls: what is journaled, how a replay is rebuilt, and how it is streamed again."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult

from agentrewind import Call, Run
from agentrewind.adapters import Chat

from ._keys import canonical, chat_key_digests, llm_string, message_digest, site_name
from ._outcome import Outcome
from ._scope import REPLAYED_TAG, Scope

__all__ = [
    "begin_chat",
    "complete_value",
    "mark_replayed",
    "merge_chunks",
    "outcome",
    "rechunk",
    "replay",
    "replay_result",
    "stream_outcome",
    "token_chunks",
    "wants_tokens",
]

_UNSTORABLE = "chat call {key} not journaled"
_WORDS = re.compile(r"\S+\s*|\s+")
_STRUCTURED_KWARGS = ("ls_structured_output_format", "structured_output_format")


def begin_chat(
    scope: Scope,
    model: Any,
    messages: list[BaseMessage],
    stop: list[str] | None,
    kwargs: dict[str, Any],
    metadata: dict[str, Any] | None,
) -> Call:
    """Decide whether this chat call replays (`call.hit`), is served by the cache, or runs."""
    params = {k: v for k, v in kwargs.items() if k not in _STRUCTURED_KWARGS}
    if stop is not None:
        params["stop"] = stop
    key, digests = chat_key_digests(llm_string(model), messages, params)
    inputs = Chat(messages, digests, {"params": json.loads(canonical(params))} if params else None)
    run: Run = scope.run
    name = site_name(model.get_name(), metadata)
    return run.begin("llm", name, key, inputs=inputs, cache=scope.cache)


def _plain(value: Any) -> Any:
    """JSON-safe copy of provider extras (generation info, llm output)."""
    if value is None:
        return None
    return json.loads(json.dumps(value, default=str))


def total_tokens(messages: Iterable[Any]) -> int:
    """Tokens the messages' `usage_metadata` reports (what a replay of them saves)."""
    return sum(
        int((getattr(m, "usage_metadata", None) or {}).get("total_tokens", 0) or 0)
        for m in messages
    )


def complete_value(result: ChatResult) -> tuple[dict[str, Any], dict[str, Any]]:
    """The journal value and meta (token usage) of a finished chat call."""
    generations = [
        {"message": g.message, "info": _plain(g.generation_info)} for g in result.generations
    ]
    tokens = total_tokens(g.message for g in result.generations)
    value = {"generations": generations, "llm_output": _plain(result.llm_output)}
    return value, {"tokens": tokens}


def outcome(result: ChatResult) -> Outcome:
    """What the journal keeps of a finished chat call (see `settle`)."""
    value, meta = complete_value(result)
    parts = tuple(
        (message_digest(g.message), ["generations", i, "message"])
        for i, g in enumerate(result.generations)
    )
    return Outcome(value, meta, what=_UNSTORABLE, parts=parts)


def stream_outcome(chunks: list[Any]) -> Outcome:
    """What the journal keeps of a finished stream: its merged result, if it sent anything."""
    if not chunks:
        return Outcome(record=False)
    return outcome(merge_chunks(chunks))


def replay_result(call: Call) -> ChatResult:
    """Rebuild the recorded `ChatResult` of a hit (fresh message objects each time)."""
    value = call.value()
    if value is None:  # a skipped incomplete call has no output
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=""))])
    # `value()` decodes the record again on every call: the messages are fresh objects.
    generations = [
        ChatGeneration(message=g["message"], generation_info=g["info"])
        for g in value["generations"]
    ]
    return ChatResult(generations=generations, llm_output=value["llm_output"])


def replay(call: Call, run_manager: Any, forced: bool) -> tuple[ChatResult, list[Any]]:
    """The recorded result of a hit, and the tokens its callbacks must still be sent.

    Tokens go out when the call stands in for a replayed stream (`forced`) or when a
    streaming handler listens; the callbacks still to come are tagged as replayed.
    """
    result = replay_result(call)
    mark_replayed(run_manager)
    if run_manager is not None and (forced or wants_tokens(run_manager)):
        return result, token_chunks(result)
    return result, []


def rechunk(message: BaseMessage) -> list[AIMessageChunk]:
    """Split a recorded message into chunks a streaming consumer can render word by word.

    Text is cut after each word; tool calls, usage and response metadata ride on the last
    chunk (as providers send them). The chunks add up to the recorded message.
    """
    content = message.content
    pieces: list[Any] = _WORDS.findall(content) if isinstance(content, str) else [content]
    if not pieces:
        pieces = [""]
    chunks = [AIMessageChunk(content=p, id=message.id) for p in pieces[:-1]]
    tool_calls = getattr(message, "tool_calls", None) or []
    last = AIMessageChunk(
        content=pieces[-1],
        id=message.id,
        additional_kwargs=dict(message.additional_kwargs),
        response_metadata=dict(message.response_metadata),
        usage_metadata=getattr(message, "usage_metadata", None),
        tool_call_chunks=[
            {
                "name": c["name"],
                "args": json.dumps(c["args"]),
                "id": c.get("id"),
                "index": i,
                "type": "tool_call_chunk",
            }
            for i, c in enumerate(tool_calls)
        ],
        chunk_position="last",
    )
    chunks.append(last)
    return chunks


def merge_chunks(chunks: list[Any]) -> ChatResult:
    """The `ChatResult` a completed stream adds up to."""
    from langchain_core.messages import message_chunk_to_message

    merged = chunks[0]
    for chunk in chunks[1:]:
        merged = merged + chunk
    return ChatResult(generations=[ChatGeneration(message=message_chunk_to_message(merged))])


def token_chunks(result: ChatResult) -> list[ChatGenerationChunk]:
    """Generation chunks for `on_llm_new_token` when a replay must stream."""
    return [ChatGenerationChunk(message=c) for c in rechunk(result.generations[0].message)]


def wants_tokens(run_manager: Any) -> bool:
    """True when a streaming handler (stream_mode="messages", astream_events) listens."""
    if run_manager is None:
        return False
    from langchain_core.tracers._streaming import _StreamingCallbackHandler

    return any(isinstance(h, _StreamingCallbackHandler) for h in run_manager.handlers)


def mark_replayed(run_manager: Any) -> None:
    """Tag the callbacks still to come for this call (`on_llm_new_token`, `on_llm_end`)."""
    if run_manager is None:
        return
    if REPLAYED_TAG not in run_manager.tags:
        run_manager.tags.append(REPLAYED_TAG)
    run_manager.metadata["agentrewind"] = "replayed"
