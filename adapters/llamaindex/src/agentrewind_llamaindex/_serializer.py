"""`RewindSerializer`: the workflow's JSON serializer as the journal uses it.

It encodes agent memory by reference (see `_memory`), and it never lets a `ctx.store` value
that JSON cannot hold fail the user's run: such a value is encoded, in order, by agentrewind's
serde (registered codecs; pickle when the `Middleware` has `allow_pickle=True`), then by the
workflow's own `PickleSerializer` if the workflow was given one. A value none of them can store
is journaled as a marker naming its type: the run goes on exactly as unwrapped (the live store
keeps the value), a warning names the key, the type and the fix, and a resume that needs the
value stops with a `SerializationError` saying the same.
"""

from __future__ import annotations

import logging
from typing import Any

from llama_index.core.memory.types import BaseMemory
from pydantic import BaseModel
from workflows.context.serializers import JsonSerializer, PickleSerializer
from workflows.context.utils import get_qualified_name

from agentrewind import SerializationError, Serializer

from ._memory import REF, MemoryRegistry

__all__ = ["UNSTORABLE", "RewindSerializer", "unstorable_error", "unstorable_paths"]

SERDE = "__agentrewind_serde__"
PICKLED = "__agentrewind_pickle__"
UNSTORABLE = "__agentrewind_unstorable__"
"""The key of the marker journaled in place of a value no serializer could store."""
_SPECIAL = (REF, SERDE, PICKLED, UNSTORABLE)
_FIX = (
    "register a codec for it (agentrewind.register_codec), pass allow_pickle=True to the "
    "Middleware, give the workflow serializer=PickleSerializer(), or keep the object out of "
    "ctx.store (a workflow attribute or resource)"
)

logger = logging.getLogger("agentrewind.llamaindex")


def _is_json_leaf(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | float | str)


def _type_name(value: Any) -> str:
    return f"{type(value).__module__}.{type(value).__qualname__}"


def unstorable_error(paths: dict[str, str]) -> SerializationError:
    """The error a resume raises when the journaled state lacks values it needs."""
    listed = ", ".join(f"{path!r} ({kind})" for path, kind in paths.items())
    return SerializationError(
        f"this run cannot resume: the journal could not store ctx.store value(s) {listed}; {_FIX}",
        path=next(iter(paths), "$"),
    )


def unstorable_paths(tree: Any, path: str = "") -> dict[str, str]:
    """The paths (JSON pointers) of unstorable-value markers in a journaled tree."""
    found: dict[str, str] = {}
    if isinstance(tree, dict):
        if set(tree) == {UNSTORABLE}:
            return {path or "/": str(tree[UNSTORABLE])}
        for key, value in tree.items():
            found.update(unstorable_paths(value, f"{path}/{key}"))
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            found.update(unstorable_paths(value, f"{path}/{i}"))
    return found


class RewindSerializer(JsonSerializer):
    """The workflow's JSON serializer, with memory by reference and a fallback for non-JSON.

    Args:
        base: The workflow's JSON serializer (its allowed types are kept).
        memories: The run's agent memories.
        serde: agentrewind's serializer (the `Middleware`'s: codecs, `allow_pickle`).
        framework: The workflow's own serializer when it is a `PickleSerializer`.
    """

    def __init__(
        self,
        base: JsonSerializer,
        memories: MemoryRegistry,
        serde: Serializer | None = None,
        framework: PickleSerializer | None = None,
    ) -> None:
        self.__dict__.update(base.__dict__)
        self.memories = memories
        self.serde = serde or Serializer()
        self.framework = framework
        self._warned: set[str] = set()

    def serialize_value(self, value: Any) -> Any:
        if isinstance(value, BaseMemory):
            return {REF: self.memories.ref_for(value)}
        if isinstance(value, tuple):
            return [self.serialize_value(v) for v in value]  # JSON keeps tuples as lists
        try:
            out = super().serialize_value(value)
        except Exception:
            if isinstance(value, BaseModel) and not hasattr(value, "class_name"):
                try:  # a model (an event, a tick) with a field JSON cannot hold: just that field
                    dumped = value.model_dump(mode="json", fallback=self._fallback)
                except Exception:
                    return self._fallback(value)
                qualified = get_qualified_name(value)
                return {"__is_pydantic": True, "value": dumped, "qualified_name": qualified}
            return self._fallback(value)
        if out is value and not _is_json_leaf(value):
            return self._fallback(value)  # the framework leaves unknown objects as they are
        return out

    def _fallback(self, value: Any) -> Any:
        try:
            return {SERDE: self.serde.to_tree(value)}
        except Exception:  # SerializationError, or a model that cannot dump itself
            pass
        if self.framework is not None:
            try:
                return {PICKLED: self.framework.serialize(value)}
            except Exception:
                pass
        return {UNSTORABLE: _type_name(value)}

    def deserialize_value(self, data: Any) -> Any:
        if isinstance(data, dict) and len(data) == 1 and next(iter(data)) in _SPECIAL:
            kind, payload = next(iter(data.items()))
            if kind == REF:
                return self.memories.resolve(payload)
            if kind == SERDE:
                return self.serde.from_tree(payload)
            if kind == PICKLED and self.framework is not None:
                return self.framework.deserialize(payload)
            if kind == UNSTORABLE:
                raise unstorable_error({"$": str(payload)})
        return super().deserialize_value(data)

    def warn_unstorable(self, tree: Any, where: str) -> None:
        """Log (once per path) the values in a journaled write that the journal cannot hold.

        A log line, not a warning: a run that works unwrapped must not fail under
        `-W error` for a value only the journal needed.
        """
        for path, kind in unstorable_paths(tree, where).items():
            if path in self._warned:
                continue
            self._warned.add(path)
            logger.warning(
                "ctx.store value at %s (%s) cannot be journaled; the run goes on, but it "
                "cannot resume from the journal past this write: %s",
                path,
                kind,
                _FIX,
            )

    def with_types(self, *classes: type[Any]) -> JsonSerializer:
        return self
