"""Closing a store safely: operations in flight finish first, later ones are refused.

Every public method of a `Store` (sync and async) passes a gate: it is counted while it runs,
and refused with `StoreClosedError` once `close()` started. `close()` waits (bounded by
`Store.close_wait`) for the operations in flight on other threads and event loops, then
releases the backend's connections; if some are still running then, the last one to finish
releases them (a connection is never closed under a thread using it: with SQLite that was a
segmentation fault).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ..errors import StoreClosedError

__all__ = ["Gate", "gated", "gated_aclose", "gated_async", "gated_close", "in_context"]

T = TypeVar("T")

_INSIDE: contextvars.ContextVar[object | None] = contextvars.ContextVar(
    "agentrewind_store_inside", default=None
)
"""The gate whose operation this context runs (nested calls of that store pass freely)."""


class Gate:
    """The in-flight counts and closing state of one store."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.cond = threading.Condition(threading.Lock())
        self.threads = 0  # sync operations running (on any thread)
        self.loops: dict[int, int] = {}  # async operations running, by event loop
        self.closing = False
        self.closed = False
        self.deferred: Callable[[], None] | None = None

    def refuse(self) -> StoreClosedError:
        return StoreClosedError(f"{self.what} is closed; open it again to use it")

    def enter(self, loop: int | None) -> None:
        with self.cond:
            if self.closing:
                raise self.refuse()
            if loop is None:
                self.threads += 1
            else:
                self.loops[loop] = self.loops.get(loop, 0) + 1

    def leave(self, loop: int | None) -> None:
        run: Callable[[], None] | None = None
        with self.cond:
            if loop is None:
                self.threads -= 1
            else:
                self.loops[loop] -= 1
            if self.closing and self.deferred is not None and self._idle(None):
                run, self.deferred = self.deferred, None
            self.cond.notify_all()
        if run is not None:
            run()

    def _idle(self, skip_loop: int | None) -> bool:
        return self.threads == 0 and all(n == 0 for lp, n in self.loops.items() if lp != skip_loop)

    def close(self, release: Callable[[], None], wait: float, skip_loop: int | None) -> None:
        """Refuse new operations, wait up to `wait` seconds for those in flight, then `release`."""
        deadline = time.monotonic() + wait
        with self.cond:
            if self.closed:
                return
            self.closing = True
            while not self._idle(skip_loop):
                left = deadline - time.monotonic()
                if left <= 0:
                    # Still busy: the last operation out releases the connections.
                    self.deferred = release
                    self.closed = True
                    return
                self.cond.wait(left)
            self.closed = True
        release()

    def busy(self, skip_loop: int | None) -> bool:
        with self.cond:
            return not self._idle(skip_loop)


def _running_loop() -> int | None:
    try:
        return id(asyncio.get_running_loop())
    except RuntimeError:
        return None


def gated(fn: Callable[..., T]) -> Callable[..., T]:
    """A sync store method behind its store's gate."""

    @functools.wraps(fn)
    def method(self: Any, *args: Any, **kwargs: Any) -> T:
        gate: Gate = self._gate
        if _INSIDE.get() is gate:
            if gate.closed and gate.deferred is None:
                raise gate.refuse()  # admitted before close, resumed after it released
            return fn(self, *args, **kwargs)
        gate.enter(None)
        token = _INSIDE.set(gate)
        try:
            return fn(self, *args, **kwargs)
        finally:
            _INSIDE.reset(token)
            gate.leave(None)

    method._gated = True  # type: ignore[attr-defined]
    return method


def gated_async(fn: Callable[..., Coroutine[Any, Any, T]]) -> Callable[..., Coroutine[Any, Any, T]]:
    """An async store method behind its store's gate (counted against its event loop)."""

    @functools.wraps(fn)
    async def method(self: Any, *args: Any, **kwargs: Any) -> T:
        gate: Gate = self._gate
        if _INSIDE.get() is gate:
            return await fn(self, *args, **kwargs)
        loop = id(asyncio.get_running_loop())
        gate.enter(loop)
        token = _INSIDE.set(gate)
        try:
            return await fn(self, *args, **kwargs)
        finally:
            _INSIDE.reset(token)
            gate.leave(loop)

    method._gated = True  # type: ignore[attr-defined]
    return method


def gated_close(fn: Callable[[Any], None]) -> Callable[[Any], None]:
    """`close()`: wait for other threads' and loops' operations, then release (once)."""

    @functools.wraps(fn)
    def close(self: Any) -> None:
        gate: Gate = self._gate
        if _INSIDE.get() is gate:  # `aclose` releasing through `close`
            fn(self)
            return
        # Operations of this thread's own running loop cannot progress while we block it:
        # they are refused from now on, and the release waits for none of them.
        gate.close(functools.partial(_release, fn, self, gate), self.close_wait, _running_loop())

    close._gated = True  # type: ignore[attr-defined]
    return close


def gated_aclose(fn: Callable[[Any], Coroutine[Any, Any, None]]) -> Callable[..., Any]:
    """`aclose()`: like `close`, awaiting this loop's operations in flight too."""

    @functools.wraps(fn)
    async def aclose(self: Any) -> None:
        gate: Gate = self._gate
        with gate.cond:
            if gate.closed:
                return
            gate.closing = True
        deadline = time.monotonic() + self.close_wait
        while gate.busy(None) and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        if gate.busy(None):
            # The last operation out releases the connections, through `close`.
            gate.close(functools.partial(_release, _close, self, gate), 0.0, None)
            return
        token = _INSIDE.set(gate)
        try:
            await fn(self)
        finally:
            _INSIDE.reset(token)
            with gate.cond:
                gate.closed = True

    aclose._gated = True  # type: ignore[attr-defined]
    return aclose


def _release(fn: Callable[[Any], None], store: Any, gate: Gate) -> None:
    token = _INSIDE.set(gate)
    try:
        fn(store)
    finally:
        _INSIDE.reset(token)


def _close(store: Any) -> None:
    store.close()


def in_context(fn: Callable[[], T]) -> Callable[[], T]:
    """`fn` run in a copy of the caller's context (a worker thread sees its admitted gate).

    The worker thread counts as a thread in flight while it runs: a `close()` called from
    the admitting event loop's own thread waits for it (the thread can progress while that
    loop is blocked), instead of releasing the connection under it.
    """
    ctx = contextvars.copy_context()

    def run() -> T:
        gate = ctx.get(_INSIDE)
        if not isinstance(gate, Gate):
            return ctx.run(fn)
        with gate.cond:
            if gate.closed and gate.deferred is None:
                raise gate.refuse()  # admitted before close, started after it released
            gate.threads += 1
        try:
            return ctx.run(fn)
        finally:
            gate.leave(None)

    return run
