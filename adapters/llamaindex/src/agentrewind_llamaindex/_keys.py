"""What identifies an LLM or tool call: inputs normalised so a resumed run finds its record.

Ids that change on every run (message ids, tool-call ids) and the workflow `Context` a
context-aware tool receives are kept out of keys (DESIGN §3).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel
from workflows import Context

from agentrewind.adapters import Chat

__all__ = ["chat_inputs", "llm_key", "plain", "strip_context", "tool_key"]

_VOLATILE = frozenset({"id", "id_", "tool_call_id", "tool_id", "call_id"})
# Below these keys sit a tool's arguments: an argument named `id` is input, never a random id.
_ARGUMENTS = frozenset({"tool_kwargs", "arguments", "args", "kwargs", "input"})


def strip_context(value: Any) -> Any:
    """Drop workflow `Context` objects from (nested) dicts, lists and tuples of arguments."""
    if isinstance(value, Mapping):
        return {k: strip_context(v) for k, v in value.items() if not isinstance(v, Context)}
    if isinstance(value, list | tuple):
        return type(value)(strip_context(v) for v in value if not isinstance(v, Context))
    return value


def _plain(value: Any, depth: int = 0, volatile: frozenset[str] = _VOLATILE) -> Any:
    """JSON-like data for hashing: pydantic dumped, `volatile` keys removed, objects named."""
    if depth > 20:
        return repr(value)
    if isinstance(value, Context):
        return None
    if isinstance(value, BaseModel):
        try:
            value = value.model_dump(mode="json")
        except Exception:
            return f"<{type(value).__qualname__}>"
    if isinstance(value, Mapping):
        return {
            str(k): _plain(v, depth + 1, frozenset() if str(k) in _ARGUMENTS else volatile)
            for k, v in value.items()
            if str(k) not in volatile and not isinstance(v, Context)
        }
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [_plain(v, depth + 1, volatile) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    metadata = getattr(value, "metadata", None)
    if metadata is not None and hasattr(metadata, "name"):  # a tool passed to *_with_tools
        return _tool_spec(value)
    return f"<{type(value).__qualname__}>"


def plain(value: Any) -> Any:
    """JSON-like data for hashing a key input: volatile ids removed, objects named."""
    return _plain(value)


def _tool_spec(tool: Any) -> dict[str, Any]:
    meta = tool.metadata
    try:
        params = meta.get_parameters_dict()
    except Exception:
        params = None
    # A JSON schema: a property named `id` is part of the tool's interface, not a volatile id.
    spec = _plain(params, volatile=frozenset())
    return {"name": meta.name, "description": meta.description, "parameters": spec}


def llm_key(llm: Any, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Key input of an LLM call: the model's identity, the method family and its inputs."""
    try:
        meta = llm.metadata.model_dump(mode="json")
    except Exception:
        meta = {}
    return {
        "llm": type(llm).__qualname__,
        "model": _plain(meta),
        "method": method.removeprefix("a").removeprefix("stream_") if method else method,
        "stream": "stream" in method,
        "args": _plain(list(args)),
        "kwargs": _plain(kwargs),
    }


def tool_key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Key input of a tool call: its arguments without the injected `Context`.

    Arguments are kept whole: an argument named `id` is input like any other (agents pass
    the model's `tool_kwargs`, never a tool-call id), so `get_order(id="B")` can never
    replay the result of `get_order(id="A")`.
    """
    keep_all: frozenset[str] = frozenset()
    return {
        "args": _plain(list(args), volatile=keep_all),
        "kwargs": _plain(strip_context(kwargs), volatile=keep_all),
    }


def chat_inputs(key: dict[str, Any]) -> Chat | None:
    """The recorded inputs of a chat call, from its key input: its messages stored once per run.

    The messages (the first argument, or `messages=`) are the key's plain data, digested one
    by one; the rest of the key (model, method, other arguments) is stored whole. None for a
    call without a message list (a completion: its key input is recorded as it is).
    """
    args, kwargs = key.get("args") or [], key.get("kwargs") or {}
    if args and isinstance(args[0], list):
        messages, rest = args[0], {**key, "args": args[1:]}
    elif isinstance(kwargs.get("messages"), list):
        messages = kwargs["messages"]
        rest = {**key, "kwargs": {k: v for k, v in kwargs.items() if k != "messages"}}
    else:
        return None
    digests = b"".join(
        hashlib.blake2b(
            json.dumps(m, sort_keys=True, separators=(",", ":")).encode(), digest_size=16
        ).digest()
        for m in messages
    )
    return Chat(messages, digests, rest)
