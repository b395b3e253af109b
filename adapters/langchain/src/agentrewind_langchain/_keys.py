"""Replay keys: what identifies a chat or tool call, with everything random taken out.

Message ids (`add_messages` assigns uuid4s, models assign `lc_run--<uuid>`), tool-call ids,
provider response metadata and injected state/runtime arguments differ on every run; keeping
them would make every resumed call a miss. Memory addresses in reprs (`<function f at 0x..>`)
differ per process and are removed as well. Tool arguments are kept whole (an argument named
`id` is input like any other).

A key is the blake2b digest of one canonical JSON text, written by `json.dumps` in C: the
journal hashes that short digest instead of walking the messages again. The model part of a
chat key (`_get_llm_string`) is cached per model instance until one of its fields is
reassigned; LangChain itself caches the serialized model for its LLM cache the same way.

A chat key hashes the digests of its messages, not the messages: each message's digest is
cached per message object until one of its fields is reassigned, so an agent's growing history
costs each message's canonical text once, and a call pays only for its new messages (a
200-message history is a list of 200 cached digests, not 200 messages to walk again).
"""

from __future__ import annotations

import hashlib
import json
import re
import weakref
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables.config import var_child_runnable_config
from langchain_core.tools import BaseTool

__all__ = [
    "canonical",
    "chat_key",
    "llm_string",
    "message_digest",
    "site_name",
    "tool_input_view",
    "tool_key",
]

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_ID_FIELDS = frozenset(("id", "tool_call_id"))
_CACHE_LIMIT = 512


def _scrub(value: Any) -> Any:
    """JSON-able copy of `value` (the slow path for what `json.dumps` refuses)."""
    if isinstance(value, dict):
        return {str(k): _scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return _fallback(value)


def _without_ids(value: Any) -> Any:
    """`value` with `id`/`tool_call_id` keys removed at every level (provider extras)."""
    if isinstance(value, dict):
        return {k: _without_ids(v) for k, v in value.items() if k not in _ID_FIELDS}
    if isinstance(value, list | tuple):
        return [_without_ids(v) for v in value]
    return value


def _fallback(value: Any) -> Any:
    if isinstance(value, BaseMessage):
        return message_key(value)
    if isinstance(value, set | frozenset):
        return sorted(map(repr, value))
    return repr(value)


_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_fallback
)


def canonical(value: Any) -> str:
    """Canonical JSON text of `value`: sorted keys, reprs for other objects, no addresses."""
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError):  # keys of mixed or non-JSON types
        text = _ENCODER.encode(_scrub(value))
    if " at 0x" in text:
        text = _ADDRESS.sub("", text)
    return text


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _content(content: Any) -> Any:
    """Message content; content blocks lose their own (random) ids, nothing deeper."""
    if isinstance(content, str):
        return content
    return [_block(b) if isinstance(b, dict) else b for b in content]


def _block(block: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k not in _ID_FIELDS}


def message_key(message: BaseMessage) -> list[Any]:
    """What a provider sees of a message: type, name, content, tool calls (no ids)."""
    tool_calls = getattr(message, "tool_calls", None)
    extra = message.additional_kwargs
    if extra:
        extra = _without_ids({k: v for k, v in extra.items() if k != "tool_calls"})
    return [
        message.type,
        message.name,
        _content(message.content),
        [[c["name"], c["args"]] for c in tool_calls] if tool_calls else None,
        extra or None,
    ]


class _LLMStrings:
    """`model._get_llm_string()` per model instance, recomputed when a field is reassigned."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[Any], tuple[Any, ...], str]] = {}

    def get(self, model: Any) -> str:
        fields = tuple(model.__dict__.values())
        entry = self._entries.get(id(model))
        if (
            entry is not None
            and entry[0]() is model
            and len(entry[1]) == len(fields)
            and all(a is b for a, b in zip(entry[1], fields, strict=True))
        ):
            return entry[2]
        text = _ADDRESS.sub("", model._get_llm_string())
        if len(self._entries) >= _CACHE_LIMIT:
            self._entries.clear()
        self._entries[id(model)] = (weakref.ref(model), fields, text)
        return text


llm_string = _LLMStrings().get
"""The model part of a chat key (its `_get_llm_string()` without call arguments), cached."""


class _MessageDigests:
    """The digest of `message_key(m)` per message object, kept while its fields are the same.

    An entry holds the message weakly and a copy of its field dict (so a reassigned field is a
    new object, never a recycled address); the copy is compared with `==`, which is an identity
    check for unchanged fields and a value check otherwise: equal fields make an equal key
    view, so the cached digest stays right. `joined` checks a whole prompt in one loop with no
    allocation per cached message (a 200-message history costs ~30 us, not ~55).
    """

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[BaseMessage], dict[str, Any], bytes]] = {}

    def get(self, message: BaseMessage) -> bytes:
        entry = self._entries.get(id(message))
        if entry is not None and entry[1] == message.__dict__ and entry[0]() is message:
            return entry[2]
        return self._compute(message)

    def joined(self, messages: Sequence[BaseMessage]) -> bytes:
        """The digests of `messages`, concatenated (16 bytes each, so unambiguous)."""
        find = self._entries.get
        parts: list[bytes] = []
        for message in messages:
            entry = find(id(message))
            if entry is not None and entry[1] == message.__dict__ and entry[0]() is message:
                parts.append(entry[2])
            else:
                parts.append(self._compute(message))
        return b"".join(parts)

    def _compute(self, message: BaseMessage) -> bytes:
        fields = dict(message.__dict__)
        digest = hashlib.blake2b(canonical(message_key(message)).encode(), digest_size=16).digest()
        if len(self._entries) >= _MESSAGE_CACHE_LIMIT:
            self._entries.clear()
        self._entries[id(message)] = (weakref.ref(message), fields, digest)
        return digest


_MESSAGE_CACHE_LIMIT = 65_536
_digests = _MessageDigests()
message_digest = _digests.get
"""The 16-byte digest of one message's key view (`message_key`), cached per message object."""


def chat_key(
    llm: str, messages: Sequence[BaseMessage], params: Any = None, extra: Any = None
) -> str:
    """Key input of a chat call: a digest of the model, call parameters and messages.

    Args:
        llm: The model's `llm_string`.
        messages: The prompt.
        params: Call arguments (`stop`, bound tools, settings).
        extra: Anything else that changes the request (agent tools, response format).
    """
    digest = hashlib.blake2b(canonical([llm, params, extra]).encode(), digest_size=16)
    digest.update(_digests.joined(messages))
    return digest.hexdigest()


class _InjectedArgs:
    """Which input keys `tool._filter_injected_args` drops, cached per schema and key set.

    Filtering depends only on the key names, the tool's `args_schema` and its injected
    parameters; LangChain recomputes the schema's type hints on every call (~50 us).
    """

    def __init__(self) -> None:
        self._dropped: dict[tuple[Any, ...], frozenset[str]] = {}

    def filter(self, tool: BaseTool, tool_input: dict[str, Any]) -> dict[str, Any]:
        schema = tool.args_schema
        if schema is not None and not isinstance(schema, type):
            return tool._filter_injected_args(tool_input)
        cache_key = (schema, getattr(tool, "_injected_args_keys", None), *tool_input)
        dropped = self._dropped.get(cache_key)
        if dropped is None:
            kept = tool._filter_injected_args(tool_input)
            dropped = frozenset(k for k in tool_input if k not in kept)
            if len(self._dropped) >= _CACHE_LIMIT:
                self._dropped.clear()
            self._dropped[cache_key] = dropped
        if not dropped:
            return tool_input
        return {k: v for k, v in tool_input.items() if k not in dropped}


_injected = _InjectedArgs()


def tool_input_view(tool: BaseTool, tool_input: Any) -> Any:
    """The input as the model gave it: injected (state, runtime, config) arguments removed."""
    if isinstance(tool_input, dict):
        return _injected.filter(tool, tool_input)
    return tool_input


def tool_key(tool: Any, tool_input: Any) -> str:
    """Key input of a tool call: a digest of its input without injected arguments."""
    if isinstance(tool, BaseTool):
        tool_input = tool_input_view(tool, tool_input)
    return _digest(canonical(tool_input))


def site_name(name: str, metadata: dict[str, Any] | None = None) -> str:
    """The call site: `name`, qualified by the LangGraph node and step when inside a graph.

    A graph resumed from its checkpointer does not re-run earlier nodes, so their recorded
    calls stay unconsumed; qualifying the site keeps them from being taken for divergence.
    """
    if metadata is None:
        config = var_child_runnable_config.get()
        metadata = config.get("metadata") if config else None
    if metadata:
        node = metadata.get("langgraph_node")
        if node is not None:
            return f"{name}@{node}:{metadata.get('langgraph_step', '')}"
    return name
