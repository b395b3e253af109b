"""Timeline operations written once as generators, driven synchronously or asynchronously.

An operation (checkpoint, rollback, merge, `safe_execute`...) is a generator, a *flow*, that
yields what it needs done and receives the result, or has the error thrown in at the `yield`:

- `StoreCall("put_steps", ...)`: a store method (`arun` awaits its `a`-prefixed twin);
- `UserCall(fn, ...)`: user code (`arun` awaits what it returns when that is awaitable; `run`
  refuses an awaitable with a clear error instead of running it as a failed attempt);
- `Wait(seconds, sleep)`: a pause (`arun` uses `asyncio.sleep` for the default `time.sleep`);
- `Blocking(fn, ...)`: other blocking I/O such as a Redis `PUBLISH` (`arun` runs it in a thread);
- `Locked(flow)`: a sub-flow that must not interleave with other writes of the same timeline
  (`run` holds the timeline's `RLock`; `arun` holds a per-event-loop `asyncio.Lock` and that
  `RLock`, so tasks and threads are both kept out).

So the decisions (what to write, which head moves, when to retry) exist once, in the flows;
the two runners below only perform I/O (`FlowSteps` steps the flow for both).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import threading
import time
import weakref
from collections.abc import Callable, Generator
from typing import Any, TypeVar

from .._flowsteps import FlowSteps
from ..stores import Store
from .checkpoint import TimelineError

__all__ = ["Blocking", "Flow", "FlowRunner", "Locked", "StoreCall", "UserCall", "Wait"]

T = TypeVar("T")


@dataclasses.dataclass(slots=True)
class StoreCall:
    """Call `store.<method>(*args, **kwargs)` (or await `store.a<method>(...)`)."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(slots=True)
class UserCall:
    """Call user code; in async flows an awaitable result is awaited."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(slots=True)
class Wait:
    """Pause `seconds` with `sleep` (async flows: `asyncio.sleep` unless `sleep` is custom)."""

    seconds: float
    sleep: Callable[[float], Any] = time.sleep


@dataclasses.dataclass(slots=True)
class Blocking:
    """Blocking I/O that is not a store method; async flows run it in a worker thread."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()


@dataclasses.dataclass(slots=True)
class Locked:
    """Run `flow` while holding the timeline's write lock; its return value is the result."""

    flow: Flow[Any]


Op = StoreCall | UserCall | Wait | Blocking | Locked
Flow = Generator[Op, Any, T]
"""A generator that yields `Op`s and returns the operation's result."""


class _Misuse(TimelineError):
    """Raised by a runner straight to the caller, never thrown into the flow."""


class FlowRunner:
    """Runs flows against one store; one runner (and lock) per `Timeline` object."""

    def __init__(self, store: Store, lock: threading.RLock | None = None) -> None:
        self.store = store
        self.lock = lock or threading.RLock()
        self._alocks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )

    # -- sync -------------------------------------------------------------------------------
    def run(self, flow: Flow[T], *, held: bool = False) -> T:
        """Drive `flow` to its end in this thread and return its result."""
        steps = FlowSteps(flow)
        for op in steps:
            try:
                steps.value = self._do(op, held)
            except _Misuse:
                flow.close()
                raise
            except BaseException as exc:  # into the flow, which may handle it
                steps.error = exc
        return steps.result

    def _do(self, op: Op, held: bool) -> Any:
        if isinstance(op, StoreCall):
            return getattr(self.store, op.method)(*op.args, **op.kwargs)
        if isinstance(op, Locked):
            if held:
                return self.run(op.flow, held=True)
            with self.lock:
                return self.run(op.flow, held=True)
        if isinstance(op, UserCall):
            result = op.fn(*op.args, **op.kwargs)
            if inspect.isawaitable(result):
                if inspect.iscoroutine(result):
                    result.close()  # never awaited: avoid the "never awaited" warning
                raise _Misuse(
                    f"{getattr(op.fn, '__qualname__', op.fn)!r} returned an awaitable: use the "
                    "async method (for example `await timeline.asafe_execute(...)`)"
                )
            return result
        if isinstance(op, Wait):
            return op.sleep(op.seconds)
        return op.fn(*op.args)

    # -- async ------------------------------------------------------------------------------
    async def arun(self, flow: Flow[T], *, held: bool = False) -> T:
        """Drive `flow` to its end on the running event loop and return its result."""
        steps = FlowSteps(flow)
        for op in steps:
            try:
                steps.value = await self._ado(op, held)
            except BaseException as exc:  # into the flow, which may handle it
                steps.error = exc
        return steps.result

    def _alock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        lock = self._alocks.get(loop)
        if lock is None:
            lock = self._alocks[loop] = asyncio.Lock()
        return lock

    async def _ado(self, op: Op, held: bool) -> Any:
        if isinstance(op, StoreCall):
            return await getattr(self.store, "a" + op.method)(*op.args, **op.kwargs)
        if isinstance(op, Locked):
            if held:
                return await self.arun(op.flow, held=True)
            # The asyncio lock orders this loop's tasks; the RLock then keeps other threads'
            # sync calls out while this task awaits its store I/O.
            async with self._alock():
                with self.lock:
                    return await self.arun(op.flow, held=True)
        if isinstance(op, UserCall):
            result = op.fn(*op.args, **op.kwargs)
            return await result if inspect.isawaitable(result) else result
        if isinstance(op, Wait):
            if op.sleep is time.sleep:
                return await asyncio.sleep(op.seconds)
            waited = op.sleep(op.seconds)
            return await waited if inspect.isawaitable(waited) else waited
        return await asyncio.to_thread(op.fn, *op.args)
