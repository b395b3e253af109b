"""Journal values for LangChain objects: field dicts under an allowlisted class name, no pickle.

A message is stored as `{"lc": "AIMessage", "content": ..., "id": ..., ...}`: the class name
from `ALLOWED_OBJECTS` and the fields that differ from their defaults. The core serializer
walks the fields, so nested values (pydantic models in `additional_kwargs`, messages inside a
`ChatGeneration`) get their own tags. Loading looks the name up in the allowlist and calls the
class, so pydantic validates every field; no module is imported and no code runs. This is
about 10x cheaper than `langchain_core.load.dumpd`/`load`, which walk `to_json` and the
constructor manifest. Records written in the `dumpd` format (`{"lc": 1, ...}`) still load,
through `langchain_core.load` with the same allowlist.

Other LangChain data objects (prompt values, agent actions, generations, legacy messages:
`Serializable` classes of `langchain_core` that are not runnables) fall back to LangChain's
own serializer: stored as `dumpd` output and loaded with `load(allowed_objects="core")`.
Anything else follows the core serializer's rules (JSON, dataclasses, pydantic models,
registered codecs); a value none of them can store is not journaled and its call runs
again on resume, with a logged error naming the call, the type and the fix.
"""

from __future__ import annotations

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
from langchain_core.runnables import Runnable
from pydantic import ValidationError

from agentrewind import Codec, SerializationError, register_codec

__all__ = ["ALLOWED_OBJECTS", "LANGCHAIN_CODEC", "LANGCHAIN_DUMPD_CODEC"]

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

Model, prompt and chain manifests are refused: rebuilding them would run whatever
constructor arguments (base URLs, headers) the stored JSON names.
"""

CLASS_KEY = "lc"
"""Key of the allowlisted class name in a stored object."""

_BY_NAME: dict[str, type[Serializable]] = {cls.__name__: cls for cls in ALLOWED_OBJECTS}
_MISSING = object()

# `load` is marked beta and warns on every call; its undecorated function is the same code.
_load: Any = getattr(_beta_load, "__wrapped__", _beta_load)


_LAYOUTS: dict[type[Any], tuple[str, dict[str, Any]]] = {}


def _layout(cls: type[Any]) -> tuple[str, dict[str, Any]]:
    """The allowlisted name a class is stored under, and the defaults of its fields."""
    layout = _LAYOUTS.get(cls)
    if layout is None:
        base = next(c for c in cls.__mro__ if c in ALLOWED_OBJECTS)  # a subclass loads as it
        defaults = {
            name: field.get_default(call_default_factory=True)
            for name, field in base.model_fields.items()
            if not field.is_required()
        }
        layout = _LAYOUTS[cls] = (base.__name__, defaults)
    return layout


def _claims(value: Any) -> bool:
    return isinstance(value, ALLOWED_OBJECTS)


def _encode(value: Any) -> dict[str, Any]:
    name, defaults = _layout(type(value))
    data: dict[str, Any] = {CLASS_KEY: name}
    for field, item in value.__dict__.items():
        default = defaults.get(field, _MISSING)
        if item is default or (type(item) is type(default) and item == default):
            continue
        data[field] = item
    extra = value.__pydantic_extra__
    if extra:
        if CLASS_KEY in extra:
            raise SerializationError(f"{name} has an extra field named {CLASS_KEY!r}")
        data.update(extra)
    return data


def _decode(data: Any) -> Any:
    name = data.get(CLASS_KEY) if isinstance(data, dict) else None
    if not isinstance(name, str):
        return _decode_dumpd(data)
    cls = _BY_NAME.get(name)
    if cls is None:
        raise SerializationError(
            f"refusing to revive {name!r}: only {', '.join(_BY_NAME)} are allowed"
        )
    fields = {k: v for k, v in data.items() if k != CLASS_KEY}
    try:
        return cls(**fields)
    except (ValidationError, TypeError, ValueError) as exc:
        raise SerializationError(f"cannot revive a stored {name}: {exc}") from exc


def _decode_dumpd(data: Any) -> Any:
    """Records of the `dumpd` format, revived by `langchain_core.load` with the allowlist."""
    try:
        return _load(data, allowed_objects=ALLOWED_OBJECTS)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise SerializationError(f"cannot revive a stored LangChain object: {exc}") from exc


LANGCHAIN_CODEC = Codec("langchain", _claims, _encode, _decode)
"""Registered on import of `agentrewind_langchain` for every `Serializer` of the process."""

register_codec(LANGCHAIN_CODEC)


# -- the fallback: LangChain's own serializer for its other data objects --------------------
_DUMPD_TYPES: dict[type[Any], bool] = {}


def _dumpd_claims(value: Any) -> bool:
    cls = type(value)
    claimed = _DUMPD_TYPES.get(cls)
    if claimed is None:
        claimed = _DUMPD_TYPES[cls] = (
            isinstance(value, Serializable)
            and not isinstance(value, (Runnable, *ALLOWED_OBJECTS))
            and cls.__module__.startswith("langchain_core.")
            and cls.is_lc_serializable()
        )
    return claimed


def _not_implemented(data: Any) -> bool:
    if isinstance(data, dict):
        return data.get("type") == "not_implemented" or any(map(_not_implemented, data.values()))
    if isinstance(data, list):
        return any(map(_not_implemented, data))
    return False


def _dumpd_encode(value: Any) -> Any:
    data = dumpd(value)
    if _not_implemented(data):
        raise SerializationError(
            f"LangChain cannot serialize every field of {type(value).__qualname__}"
        )
    return data


def _dumpd_decode(data: Any) -> Any:
    try:
        return _load(data, allowed_objects="core")
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise SerializationError(f"cannot revive a stored LangChain object: {exc}") from exc


LANGCHAIN_DUMPD_CODEC = Codec("langchain-dumpd", _dumpd_claims, _dumpd_encode, _dumpd_decode)
"""Registered after `LANGCHAIN_CODEC`: the rest of `langchain_core`'s data objects."""

register_codec(LANGCHAIN_DUMPD_CODEC)
