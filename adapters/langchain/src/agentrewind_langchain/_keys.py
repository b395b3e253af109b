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
costs each message's canonical text once, and a call computes only its new messages' digests.
Seeing that no field of the earlier messages was reassigned still reads each one's field dict;
for a prompt that begins as an earlier one, that is one pass in C (~25 us for 200 messages).
"""

from __future__ import annotations

import hashlib
import json
import operator
import re
import weakref
from collections.abc import Sequence
from contextlib import suppress
from itertools import compress
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables.config import var_child_runnable_config
from langchain_core.tools import BaseTool

__all__ = [
    "canonical",
    "chat_key",
    "chat_key_digests",
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


_Entry = tuple[weakref.ref[BaseMessage], dict[str, Any], bytes]
_Prompt = tuple[tuple[BaseMessage, ...], list[dict[str, Any]], bytes]
_SEEN: _Prompt = ((), [], b"")  # a prompt seen once: nothing kept of it yet


class _MessageDigests:
    """The digest of `message_key(m)` per message object, kept while its fields are the same.

    An entry holds the message weakly and a copy of its field dict (so a reassigned field is a
    new object, never a recycled address); the copy is compared with `==`, which is an identity
    check for unchanged fields and a value check otherwise: equal fields make an equal key
    view, so the cached digest stays right.

    A long prompt usually starts with an earlier one (an agent's history, then its new
    messages), so the last long prompts seen twice are kept too, each under its first message:
    the message objects (held strongly, so the same address is the same object), the copies
    of their field dicts and their joined digests. The messages of a new prompt that begin as
    such a prompt's are checked by loops in C, with the per-message check: the same objects
    (`is`), and their field dicts equal to the copies (one `==` over the lists). That costs
    about 0.13 us a message, not 0.22; it stays O(history), as a reassigned field is only seen
    by reading each message's dict (no hook on the messages' classes: writes that bypass
    `__setattr__`, such as `object.__setattr__` or into `__dict__`, would go unseen). Only the
    messages after that prefix, and any whose fields changed, take the per-message path.
    """

    def __init__(self) -> None:
        self._entries: dict[int, _Entry] = {}
        self._prompts: dict[int, _Prompt] = {}

    def get(self, message: BaseMessage) -> bytes:
        return self._entry(message)[2]

    def joined(self, messages: Sequence[BaseMessage]) -> bytes:
        """The digests of `messages`, concatenated (16 bytes each, so unambiguous)."""
        if len(messages) < _PROMPT_MIN:
            return b"".join(self._digests(messages))
        first = id(messages[0])
        prompt = self._prompts.pop(first, None)
        if prompt is None:  # kept (empty) in case it comes back: a sliding window's never do
            self._remember(first, _SEEN)
            return b"".join(self._digests(messages))
        objects, copies, digests = prompt
        same = list(map(operator.is_, objects, messages))
        known = same.index(False) if False in same else len(same)
        fields = copies[:known]
        now = list(map(vars, messages[:known]))
        if fields == now:
            head = digests[: 16 * known]
            if known == len(messages) < len(objects):
                self._prompts[first] = prompt  # an earlier part of it: keep the longer
                return head
        else:  # fields were reassigned: recompute those messages only
            fresh = bytearray(digests[: 16 * known])
            for i in compress(range(known), map(operator.ne, fields, now)):
                entry = self._entry(messages[i])
                fields[i] = entry[1]
                fresh[16 * i : 16 * i + 16] = entry[2]
            head = bytes(fresh)
        parts = [head]
        for message in messages[len(fields) :]:  # usually the new messages only
            entry = self._entry(message)
            fields.append(entry[1])
            parts.append(entry[2])
        joined = b"".join(parts)
        self._remember(first, (tuple(messages), fields, joined))
        return joined

    def _digests(self, messages: Sequence[BaseMessage]) -> list[bytes]:
        """`_entry(m)[2]` for each message, in one loop (no call per cached message)."""
        find = self._entries.get
        parts: list[bytes] = []
        for message in messages:
            entry = find(id(message))
            if entry is not None and entry[1] == message.__dict__ and entry[0]() is message:
                parts.append(entry[2])
            else:
                parts.append(self._compute(message)[2])
        return parts

    def _remember(self, first: int, prompt: _Prompt) -> None:
        if len(self._prompts) >= _PROMPT_CACHE_LIMIT:
            with suppress(KeyError, RuntimeError):  # another thread changed it meanwhile
                del self._prompts[next(iter(self._prompts))]  # the least recently used
        self._prompts[first] = prompt

    def _entry(self, message: BaseMessage) -> _Entry:
        entry = self._entries.get(id(message))
        if entry is not None and entry[1] == message.__dict__ and entry[0]() is message:
            return entry
        return self._compute(message)

    def _compute(self, message: BaseMessage) -> _Entry:
        entry = (
            weakref.ref(message),
            dict(message.__dict__),
            hashlib.blake2b(canonical(message_key(message)).encode(), digest_size=16).digest(),
        )
        if len(self._entries) >= _MESSAGE_CACHE_LIMIT:
            self._entries.clear()
        self._entries[id(message)] = entry
        return entry


_PROMPT_MIN = 16
_PROMPT_CACHE_LIMIT = 32
_MESSAGE_CACHE_LIMIT = 65_536
_digests = _MessageDigests()
message_digest = _digests.get
"""The 16-byte digest of one message's key view (`message_key`), cached per message object."""


def chat_key(
    llm: str, messages: Sequence[BaseMessage], params: Any = None, extra: Any = None
) -> str:
    """Key input of a chat call (see `chat_key_digests`)."""
    return chat_key_digests(llm, messages, params, extra)[0]


def chat_key_digests(
    llm: str, messages: Sequence[BaseMessage], params: Any = None, extra: Any = None
) -> tuple[str, bytes]:
    """Key input of a chat call: a digest of the model, call parameters and messages.

    Args:
        llm: The model's `llm_string`.
        messages: The prompt.
        params: Call arguments (`stop`, bound tools, settings).
        extra: Anything else that changes the request (agent tools, response format).

    Returns:
        The key input, and the messages' digests (16 bytes each) that identify them in the
        recorded inputs (`agentrewind.journal.inputs.Chat`).
    """
    digest = hashlib.blake2b(canonical([llm, params, extra]).encode(), digest_size=16)
    joined = _digests.joined(messages)
    digest.update(joined)
    return digest.hexdigest(), joined


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
