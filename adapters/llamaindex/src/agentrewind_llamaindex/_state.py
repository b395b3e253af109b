"""`ctx.store` writes become durable only with the result of the step that made them.

The live store keeps the framework's semantics (a write is visible at once, to every step).
Beside it, `DurableState` keeps the state as JSON (the `Context.to_dict()["state"]` layout)
holding only the writes of steps whose result has been journaled: each write through
`StepScopedStore` is turned into a JSON Patch of just the paths it changed and parked under
the step invocation that made it; the step's result tick applies the patches (or drops them
when the step failed). A crash therefore never persists half of an in-flight step's writes
(which a resumed run would apply a second time), and a failed step is retried on the state
from before it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from typing import Any

from pydantic import BaseModel
from workflows.context.serializers import JsonSerializer
from workflows.context.state_store import (
    DictState,
    StateCheckpoint,
    copy_state_for_edit,
    create_cleared_state,
    decode_state_tree,
    merge_state,
    set_by_path_copy,
)
from workflows.runtime.types.results import StepWorkerStateContextVar

from ._edits import EditLog, apply_edits, describe, resolve

__all__ = [
    "DurableState",
    "Patch",
    "StepScopedStore",
    "capture_writes",
    "current_invocation",
    "scoped_store",
]

Patch = list[dict[str, Any]]
"""A JSON Patch against the `Context.to_dict()["state"]` layout."""

_CAPTURE: ContextVar[list[Patch] | None] = ContextVar(
    "agentrewind_llamaindex_capture", default=None
)


def current_invocation() -> str | None:
    """The id of the step invocation running in this context, or None outside steps."""
    try:
        return StepWorkerStateContextVar.get().state.invocation_id
    except LookupError:
        return None


@contextmanager
def capture_writes() -> Iterator[list[Patch]]:
    """Collect the patches of the `ctx.store` writes made in this context (a tool call).

    A replayed tool does not run, so the writes it made (the `handoff` tool sets
    `next_agent`) are recorded with its result and applied again on replay.
    """
    captured: list[Patch] = []
    token = _CAPTURE.set(captured)
    try:
        yield captured
    finally:
        _CAPTURE.reset(token)


class DurableState:
    """The committed state of one run as JSON, advanced one step result at a time.

    Each write is kept as the edits it made (`_edits`), numbered in the order made, and
    applied when the result of the step that made it is journaled.
    """

    def __init__(self, serializer: JsonSerializer, data: dict[str, Any] | None) -> None:
        self.serializer = serializer
        self.data = data
        self.changed = data is None
        self._log = EditLog()

    def ensure(self, live_state: BaseModel) -> None:
        """Take the live state as the starting point of a fresh run."""
        if self.data is None:
            self.data = StateCheckpoint(live_state, self.serializer).to_dict()
            self.changed = True
            self._check(self.data, "")

    def note(self, before: BaseModel, after: BaseModel) -> None:
        """Park the edits from `before` to `after` under the running step invocation."""
        patch = StateCheckpoint(after, self.serializer).diff(
            StateCheckpoint(before, self.serializer)
        )
        if patch:
            self._park(describe(patch, self._reader(before)))

    def _reader(self, before: BaseModel) -> Callable[[str], Any]:
        """Read a path of the encoded `before` state, encoding only the top-level key it is in."""
        tops: dict[str, Any] = {}

        def old_at(path: str) -> Any:
            segs = path.split("/")
            if len(segs) < 4 or segs[1] != "state_data":
                return resolve({}, "/x")
            top = segs[3].replace("~1", "/").replace("~0", "~")
            if top not in tops:
                tops[top] = self._encode_top(before, top)
            return resolve({segs[2]: tops[top]}, "/" + "/".join([segs[2], *segs[3:]]))

        return old_at

    def _encode_top(self, state: BaseModel, top: str) -> dict[str, Any]:
        try:
            if isinstance(state, DictState):
                if top not in state._data:
                    return {}
                value = self.serializer.serialize_value(state._data[top])
                return {top: json.loads(json.dumps(value))}
            return {top: state.model_dump(mode="json", include={top})[top]}
        except Exception:
            return {}

    def _check(self, tree: Any, where: str) -> None:
        warn = getattr(self.serializer, "warn_unstorable", None)
        if warn is not None:
            warn(tree, where)

    def _park(self, patch: Patch) -> None:
        for op in patch:
            if "value" in op:
                self._check(op["value"], op["path"])
        self._log.park(current_invocation(), patch)
        captured = _CAPTURE.get()
        if captured is not None:
            captured.append(patch)

    def note_set(self, before: BaseModel, after: BaseModel, path: str) -> None:
        """Park the write of `ctx.store.set(path, ...)` as a write of its top-level key.

        Not a diff: agents mutate a value from `store.get` in place and set it back (the
        scratchpad list), and a diff sees the same object on both sides.
        """
        top = path.split(".", 1)[0]
        pointer = top.replace("~", "~0").replace("/", "~1")
        if isinstance(after, DictState):
            value = after._data[top]
            existed = isinstance(before, DictState) and top in before._data
            op = {"op": "replace" if existed else "add", "path": f"/state_data/_data/{pointer}"}
            op["value"] = json.loads(json.dumps(self.serializer.serialize_value(value)))
        else:
            op = {"op": "replace", "path": f"/state_data/value/{pointer}"}
            op["value"] = after.model_dump(mode="json", include={top})[top]
        self._park(describe([op], self._reader(before)))

    def commit(self, invocation_id: str | None, ok: bool) -> None:
        """Apply (or, for a failed step, drop) the writes of one invocation.

        Writes made outside any step (from the handler) are applied with every tick.
        """
        for key in (None, invocation_id) if invocation_id is not None else (None,):
            writes = self._log.take(key)
            if not ok and key is not None:
                continue
            for seq, patch in writes:
                assert self.data is not None
                self.data = self._log.apply(self.data, seq, patch)
                self.changed = True


class StepScopedStore:
    """A `ctx.store` that forwards to the live store and reports each write's patch.

    Made with `scoped_store`, it is also an instance of the live store's class sharing the
    live store's attributes, so code that checks `isinstance(ctx.store, InMemoryStateStore)` or
    calls a method not overridden here sees the framework's store.
    """

    __slots__ = ("_durable", "_live")

    def __init__(self, live: Any, durable: DurableState) -> None:
        self._live = live
        self._durable = durable

    def __getattr__(self, name: str) -> Any:
        return getattr(self._live, name)

    async def get_state(self) -> Any:
        return await self._live.get_state()

    async def get(self, path: str, default: Any = Ellipsis) -> Any:
        return await self._live.get(path, default)

    async def set(self, path: str, value: Any) -> None:
        before = await self._live.get_state()
        self._durable.note_set(before, set_by_path_copy(before, path, value), path)
        await self._live.set(path, value)

    async def set_state(self, state: Any) -> None:
        before = await self._live.get_state()
        self._durable.note(before, merge_state(before, state))
        await self._live.set_state(state)

    async def clear(self) -> None:
        before = await self._live.get_state()
        self._durable.note(before, create_cleared_state(type(before)))
        await self._live.clear()

    @asynccontextmanager
    async def edit_state(self) -> AsyncIterator[Any]:
        async with self._live.edit_state() as state:
            before = copy_state_for_edit(state)
            yield state
        self._durable.note(before, state)

    async def replay(self, patches: list[Patch]) -> None:
        """Apply recorded writes (of a replayed tool call) as one write of the running step.

        The top-level keys (fields) the patches touch take their patched values; the write is
        noted like any other, so it becomes durable with the step's result.
        """
        serializer = self._durable.serializer
        async with self.edit_state() as state:
            tree = StateCheckpoint(state, serializer).to_dict()
            touched: set[str] = set()
            whole = False
            for patch in patches:
                tree = apply_edits(tree, patch)
                for op in patch:
                    parts = op["path"].split("/")
                    if len(parts) > 3:
                        touched.add(parts[3].replace("~1", "/").replace("~0", "~"))
                    else:
                        whole = True
            new = decode_state_tree(tree["state_data"], serializer)
            if isinstance(state, DictState) and isinstance(new, DictState):
                for key in set(state._data) | set(new._data) if whole else touched:
                    if key in new._data:
                        state._data[key] = new._data[key]
                    else:
                        state._data.pop(key, None)
            else:
                for key in type(state).model_fields if whole else touched:
                    setattr(state, key, getattr(new, key))

    def to_dict(self, serializer: Any) -> dict[str, Any]:
        data: dict[str, Any] = self._live.to_dict(serializer)
        return data


_SCOPED_CLASSES: dict[type, type[StepScopedStore]] = {}


def scoped_store(live: Any, durable: DurableState) -> StepScopedStore:
    """A `StepScopedStore` over `live` that is an instance of `type(live)` too."""
    base = type(live)
    cls = _SCOPED_CLASSES.get(base)
    if cls is None:
        try:
            cls = type(f"Journaled{base.__name__}", (StepScopedStore, base), {"__slots__": ()})
        except TypeError:  # a store class that cannot be combined (slots layout)
            cls = StepScopedStore
        _SCOPED_CLASSES[base] = cls
    store = object.__new__(cls)
    if cls is not StepScopedStore and hasattr(live, "__dict__"):
        object.__setattr__(store, "__dict__", live.__dict__)  # the live store's attributes
    StepScopedStore.__init__(store, live, durable)
    return store
