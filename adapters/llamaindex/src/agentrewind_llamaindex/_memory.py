"""Agent memory, persisted by reference, one step result at a time.

`ctx.to_dict()` silently drops the agent's `memory` key and pickling a live `Memory` empties
it (llamaindex-anchors §5). Here the state holds `{"__agentrewind_memory__": ref}` instead of
the object, and the messages of each memory are journaled with the tick records (agentrewind
serde, only when they changed). On resume the memory is rebuilt from its class and messages
and handed to the restored state under the same reference.

Like `ctx.store` writes (see `_state`), memory writes are step-atomic: the write methods of
every memory class (`put`, `put_messages`, `set`, `reset` and their async twins) are hooked,
and each write is parked under the step invocation that made it. The journaled messages are
the committed ones: a step's writes join them when its result is journaled and are dropped
when it failed, so a step still in flight at a crash never leaves messages behind that its
re-run would add a second time.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import sys
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from llama_index.core.memory.types import BaseMemory

from agentrewind import SerializationError, Serializer

from ._compat import subclasses
from ._state import current_invocation

__all__ = ["ACTIVE_MEMORIES", "REF", "MemoryRegistry", "install_memory_hooks"]

REF = "__agentrewind_memory__"
"""The key of a journaled reference to an agent memory."""
_CONFIG = ("token_limit", "chat_store_key", "session_id")
_WRITES = {
    "put": "append_one",
    "aput": "append_one",
    "put_messages": "append",
    "aput_messages": "append",
    "set": "set",
    "aset": "set",
    "reset": "reset",
    "areset": "reset",
}
_MARK = "__agentrewind_memory_hook__"

ACTIVE_MEMORIES: ContextVar[MemoryRegistry | None] = ContextVar(
    "agentrewind_llamaindex_memories", default=None
)
"""The registry of the journaled run whose steps run in this context."""
_QUIET: ContextVar[bool] = ContextVar("agentrewind_llamaindex_memory_quiet", default=False)
"""Set while a write is logged (or a memory restored): nested writes are part of it."""

_Op = tuple[str, str, list[Any]]
"""(memory ref, op, message trees): op is `append`, `set` or `reset`."""


def _type_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


class MemoryRegistry:
    """Memories of one run: live objects by reference, and what was last persisted."""

    def __init__(self, serde: Serializer) -> None:
        self.serde = serde
        self.live: dict[str, BaseMemory] = {}
        self.committed: dict[str, list[Any]] = {}
        """Message trees of each memory as of the last journaled step results."""
        self._pending: dict[str | None, list[_Op]] = {}
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
            self.committed[ref] = entry["messages"]
            self._to_load[ref] = self.serde.from_tree(entry["messages"])

    async def load_pending(self) -> None:
        """Put the journaled messages back into the rebuilt memories (inside the loop)."""
        token = _QUIET.set(True)
        try:
            for ref, messages in self._to_load.items():
                await self.live[ref].aset(messages)
        finally:
            _QUIET.reset(token)
        self._to_load.clear()

    # -- step-atomic writes -------------------------------------------------------------------
    def log(self, ref: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Park one memory write under the running step invocation."""
        op = _WRITES[method]
        value = args[0] if args else next(iter(kwargs.values()), None)
        if op == "append_one":
            op, messages = "append", [value]
        else:
            messages = list(value or []) if op != "reset" else []
        entry = (ref, op, self.serde.to_tree(messages))  # a copy: later mutations stay out
        self._pending.setdefault(current_invocation(), []).append(entry)

    def commit(self, invocation_id: str | None, ok: bool) -> None:
        """Apply (or, for a failed step, drop) the memory writes of one invocation.

        Writes made outside any step (from the handler) are applied with every tick.
        """
        for key in (None, invocation_id) if invocation_id is not None else (None,):
            ops = self._pending.pop(key, [])
            if not ok and key is not None:
                continue
            for ref, op, trees in ops:
                before = self.committed.get(ref, [])
                self.committed[ref] = [*before, *trees] if op == "append" else trees

    async def base(self, ref: str, memory: BaseMemory) -> None:
        """Take a memory's messages as committed when it is first seen (before any write)."""
        if ref not in self.committed:
            self.committed[ref] = self.serde.to_tree(await memory.aget_all())

    async def snapshot(self) -> dict[str, Any] | None:
        """The memories whose committed messages changed since the last snapshot, or None."""
        changed: dict[str, Any] = {}
        for ref, memory in list(self.live.items()):
            await self.base(ref, memory)
            tree = self.committed[ref]
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


# -- the write hooks -----------------------------------------------------------------------------
def _hook(method: str, orig: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(orig):

        @functools.wraps(orig)
        async def awrapper(self: BaseMemory, *args: Any, **kwargs: Any) -> Any:
            registry = ACTIVE_MEMORIES.get()
            if registry is None or _QUIET.get():
                return await orig(self, *args, **kwargs)
            ref = registry.ref_for(self)
            await registry.base(ref, self)
            token = _QUIET.set(True)
            try:
                out = await orig(self, *args, **kwargs)
            finally:
                _QUIET.reset(token)
            registry.log(ref, method, args, kwargs)
            return out

        return awrapper

    @functools.wraps(orig)
    def wrapper(self: BaseMemory, *args: Any, **kwargs: Any) -> Any:
        registry = ACTIVE_MEMORIES.get()
        if registry is None or _QUIET.get():
            return orig(self, *args, **kwargs)
        ref = registry.ref_for(self)
        if ref not in registry.committed:
            registry.committed[ref] = registry.serde.to_tree(self.get_all())
        token = _QUIET.set(True)
        try:
            out = orig(self, *args, **kwargs)
        finally:
            _QUIET.reset(token)
        registry.log(ref, method, args, kwargs)
        return out

    return wrapper


def install_memory_hooks() -> None:
    """Hook the write methods of every memory class defined so far (idempotent)."""
    for cls in subclasses(BaseMemory):
        for method in _WRITES:
            orig = cls.__dict__.get(method)
            if orig is None or not callable(orig) or getattr(orig, _MARK, False):
                continue
            wrapper = _hook(method, orig)
            setattr(wrapper, _MARK, True)
            setattr(cls, method, wrapper)
