"""Agent memory, persisted by reference.

`ctx.to_dict()` silently drops the agent's `memory` key and pickling a live `Memory` empties
it (llamaindex-anchors §5). Here the state holds `{"__agentrewind_memory__": ref}` instead of
the object, and the messages of each memory are journaled with the tick records (agentrewind
serde, only when they changed). On resume the memory is rebuilt from its class and messages
and handed to the restored state under the same reference.
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

from llama_index.core.memory.types import BaseMemory
from workflows.context.serializers import JsonSerializer

from agentrewind import SerializationError, Serializer

__all__ = ["MemoryRegistry", "RewindSerializer"]

_REF = "__agentrewind_memory__"
_CONFIG = ("token_limit", "chat_store_key", "session_id")


def _type_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


class MemoryRegistry:
    """Memories of one run: live objects by reference, and what was last persisted."""

    def __init__(self, serde: Serializer) -> None:
        self.serde = serde
        self.live: dict[str, BaseMemory] = {}
        self._digests: dict[str, str] = {}
        self._to_load: dict[str, list[Any]] = {}

    def ref_for(self, memory: BaseMemory) -> str:
        """A stable reference to `memory`: its type and chat-store key.

        Not the object: the framework deep-copies state values in `edit_state`.
        """
        key = getattr(memory, "chat_store_key", None) or getattr(memory, "session_id", None)
        ref = f"{type(memory).__qualname__}:{key}"
        self.live[ref] = memory
        return ref

    def scan(self, state: Any) -> None:
        """Track the memories held at the top level of the live state (the newest copies)."""
        data = getattr(state, "_data", None)
        values = data.values() if isinstance(data, dict) else vars(state).values()
        for value in values:
            if isinstance(value, BaseMemory):
                self.ref_for(value)

    def resolve(self, ref: str) -> BaseMemory:
        memory = self.live.get(ref)
        if memory is None:
            raise SerializationError(f"agent memory {ref!r} is not in the journal of this run")
        return memory

    def restore(self, saved: dict[str, Any]) -> None:
        """Rebuild memories from a journaled snapshot; their messages load at session start."""
        for ref, entry in saved.items():
            module, _, qualname = entry["type"].partition(":")
            cls: Any = sys.modules.get(module)
            for part in qualname.split("."):
                cls = getattr(cls, part, None)
            if not (isinstance(cls, type) and issubclass(cls, BaseMemory)):
                raise SerializationError(f"stored memory type {entry['type']} is not loaded")
            kwargs = {k: v for k, v in entry.get("config", {}).items() if v is not None}
            memory = cls.from_defaults(**kwargs)
            self.live[ref] = memory
            self._digests[ref] = entry["digest"]
            self._to_load[ref] = self.serde.from_tree(entry["messages"])

    async def load_pending(self) -> None:
        """Put the journaled messages back into the rebuilt memories (inside the loop)."""
        for ref, messages in self._to_load.items():
            await self.live[ref].aset(messages)
        self._to_load.clear()

    async def snapshot(self) -> dict[str, Any] | None:
        """The memories whose messages changed since the last snapshot, or None."""
        changed: dict[str, Any] = {}
        for ref, memory in self.live.items():
            tree = self.serde.to_tree(await memory.aget_all())
            digest = hashlib.blake2b(
                json.dumps(tree, sort_keys=True).encode(), digest_size=12
            ).hexdigest()
            if self._digests.get(ref) == digest:
                continue
            self._digests[ref] = digest
            changed[ref] = {
                "type": _type_path(type(memory)),
                "config": {k: getattr(memory, k, None) for k in _CONFIG},
                "messages": tree,
                "digest": digest,
            }
        return changed or None


class RewindSerializer(JsonSerializer):
    """The workflow's JSON serializer, with agent memory encoded by reference."""

    def __init__(self, base: JsonSerializer, memories: MemoryRegistry) -> None:
        self.__dict__.update(base.__dict__)
        self.memories = memories

    def serialize_value(self, value: Any) -> Any:
        if isinstance(value, BaseMemory):
            return {_REF: self.memories.ref_for(value)}
        return super().serialize_value(value)

    def deserialize_value(self, data: Any) -> Any:
        if isinstance(data, dict) and _REF in data and len(data) == 1:
            return self.memories.resolve(data[_REF])
        return super().deserialize_value(data)

    def with_types(self, *classes: type[Any]) -> JsonSerializer:
        return self
