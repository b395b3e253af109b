"""Journal values for LangChain objects: `langchain_core.load` JSON with an allowlist, no pickle."""

from __future__ import annotations

import functools
from typing import Any

from langchain_core.documents import Document
from langchain_core.load import dumpd
from langchain_core.load import load as _beta_load
from langchain_core.load.serializable import Serializable
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    HumanMessage,
    HumanMessageChunk,
    RemoveMessage,
    SystemMessage,
    SystemMessageChunk,
    ToolMessage,
    ToolMessageChunk,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk

from agentrewind import Codec, SerializationError, register_codec

__all__ = ["ALLOWED_OBJECTS", "LANGCHAIN_CODEC"]

ALLOWED_OBJECTS: tuple[type[Serializable], ...] = (
    AIMessage,
    AIMessageChunk,
    HumanMessage,
    HumanMessageChunk,
    SystemMessage,
    SystemMessageChunk,
    ToolMessage,
    ToolMessageChunk,
    RemoveMessage,
    Document,
    ChatGeneration,
    ChatGenerationChunk,
)
"""The only classes a journal value may revive: messages, documents and chat generations.

Model, prompt and chain manifests are refused: `load` would rebuild them with whatever
constructor arguments (base URLs, headers) the stored JSON names.
"""

# `load` is marked beta and warns on every call; its undecorated function is the same code.
_load: Any = getattr(_beta_load, "__wrapped__", _beta_load)


def _claims(value: Any) -> bool:
    return isinstance(value, ALLOWED_OBJECTS)


def _encode(value: Serializable) -> Any:
    data = dumpd(value)
    if not isinstance(data, dict) or data.get("type") != "constructor":
        raise SerializationError(f"{type(value).__name__} is not serializable by langchain_core")
    return data


@functools.cache
def _reviver() -> Any:
    """One `Reviver` for the allowlist: building it costs ~100 us, reviving a message ~20 us."""
    from langchain_core.load.load import Reviver

    return Reviver(ALLOWED_OBJECTS)


def _revive(obj: Any) -> Any:
    # The traversal of `langchain_core.load.load`, reusing one reviver.
    from langchain_core.load.load import _is_escaped_dict, _unescape_value

    if isinstance(obj, dict):
        if _is_escaped_dict(obj):
            return _unescape_value(obj)
        return _reviver()({k: _revive(v) for k, v in obj.items()})
    if isinstance(obj, list):
        return [_revive(o) for o in obj]
    return obj


def _decode(data: Any) -> Any:
    try:
        try:
            return _revive(data)
        except ImportError:  # private helpers moved: use the public (slower) function
            return _load(data, allowed_objects=ALLOWED_OBJECTS)
    except (ValueError, TypeError, KeyError) as exc:
        raise SerializationError(f"cannot revive a stored LangChain object: {exc}") from exc


LANGCHAIN_CODEC = Codec("langchain", _claims, _encode, _decode)
"""Registered on import of `agentrewind_langchain` for every `Serializer` of the process."""

register_codec(LANGCHAIN_CODEC)
