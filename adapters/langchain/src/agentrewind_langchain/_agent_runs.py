"""The runs `RewindAgentMiddleware` keeps open across the nodes of one agent invocation.

`create_agent` has no hook around a whole invocation: `before_agent` and `after_agent` are
nodes, and an invocation can end between nodes (an interrupt, an error in another node or
middleware, a consumer that stops streaming). So a run is tied to its invocation, recognised
by the stream writer LangGraph creates for each one (`get_stream_writer()`), and it is closed
by whichever comes first:

* `after_agent` of that invocation (status `completed`);
* an error inside one of our hooks (`failed`);
* a hook of a later invocation of the same run id (`paused`: the invocation stopped before
  the agent finished, as at an interrupt);
* the invocation's writer being freed: the invocation is over (`paused`). A
  finaliser hands the run to a closer thread, because it may fire inside the garbage
  collector, in the middle of any code.

So a run never keeps its lease (and its renewal thread) after its invocation ended.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any, Literal

from agentrewind import AgentRewindError, Middleware, Run, RunContext, current_run

__all__ = ["AgentRuns", "current_invocation"]

logger = logging.getLogger("agentrewind.langchain")
Ending = Literal["completed", "failed", "paused"]


def current_invocation() -> Any:
    """The stream writer of the running graph invocation (one per invocation), or None."""
    from langgraph.config import get_stream_writer

    try:
        return get_stream_writer()
    except (RuntimeError, KeyError):
        return None


def _exit_args(ending: Ending) -> tuple[Any, Any, Any]:
    if ending == "failed":
        return RuntimeError, RuntimeError("agent invocation failed"), None
    return None, None, None


class OpenRun:
    """A run opened in its own context, so any node of the invocation can use and close it."""

    def __init__(self, context: RunContext, invocation: Any) -> None:
        self.context = context
        self.run: Run = context.run
        # An empty context: a copy of the hook's would hold the graph's config and with it the
        # invocation's writer, which then would never be freed.
        self.ctx = contextvars.Context()
        self.ready = threading.Event()
        """Set once opening finished (parallel tool calls wait for it)."""
        self.error: BaseException | None = None
        self.finalizer: weakref.finalize[Any, Any] | None = None
        self._invocation = None if invocation is None else weakref.ref(invocation)
        self._closed = False
        self._lock = threading.Lock()

    def belongs_to(self, invocation: Any) -> bool:
        """True when this run was opened by `invocation`."""
        if self._invocation is None:
            return invocation is None
        return invocation is not None and self._invocation() is invocation

    def open(self) -> None:
        try:
            self.run = self.ctx.run(self.context.__enter__)
        except BaseException as exc:
            self.error = exc
            raise
        finally:
            self.ready.set()

    async def aopen(self) -> None:
        try:
            self.run = await asyncio.create_task(self.context.__aenter__(), context=self.ctx)
        except BaseException as exc:
            self.error = exc
            raise
        finally:
            self.ready.set()

    def _take(self, ending: Ending) -> bool:
        self.ready.wait()  # still opening in another thread: close it once it is open
        with self._lock:
            if self._closed or self.error is not None:
                return False
            self._closed = True
        if self.finalizer is not None:
            self.finalizer.detach()
        if ending == "paused":
            self.run.status = "paused"
        return True

    def close(self, ending: Ending) -> None:
        """End the run (metrics and status written, lease released); idempotent."""
        if self._take(ending):
            self.ctx.run(self.context.__exit__, *_exit_args(ending))

    async def aclose(self, ending: Ending) -> None:
        """Async twin of `close`."""
        while not self.ready.is_set():
            await asyncio.sleep(0.001)
        if self._take(ending):
            await asyncio.create_task(self.context.__aexit__(*_exit_args(ending)), context=self.ctx)

    def check_ready(self) -> Run:
        if self.error is not None:
            raise AgentRewindError(
                f"run {self.run.run_id!r} could not be opened: {self.error}"
            ) from self.error
        return self.run


def _close_quietly(handle: OpenRun) -> None:
    try:
        handle.close("paused")
    except Exception as exc:  # the lease expires on its own; say so and go on
        logger.warning("agentrewind: closing run %s failed: %s", handle.run.run_id, exc)


_CLOSING: queue.SimpleQueue[OpenRun] = queue.SimpleQueue()  # put() is safe in finalisers
_closer_lock = threading.Lock()
_closer: threading.Thread | None = None


def _close_finished() -> None:
    while True:
        _close_quietly(_CLOSING.get())


def _start_closer() -> None:
    """Start the one thread per process that closes runs whose invocation was freed."""
    global _closer
    with _closer_lock:
        if _closer is None:
            _closer = threading.Thread(
                target=_close_finished, name="agentrewind-agent-runs", daemon=True
            )
            _closer.start()


class AgentRuns:
    """Open runs by run id, each tied to the invocation that opened it.

    Args:
        owner: The middleware the runs belong to.
        start: Makes the `RunContext` of a run id (the middleware's `run(...)`).
    """

    def __init__(self, owner: Middleware, start: Callable[[str], RunContext]) -> None:
        self._owner = owner
        self._start = start
        self._open: dict[str, OpenRun] = {}
        self._lock = threading.RLock()  # re-entrant: a finaliser may fire while it is held

    def __len__(self) -> int:
        return len(self._open)

    # -- bookkeeping shared by the sync and async paths ------------------------------------
    def _active(self, run_id: str) -> Run | None:
        """The run of this id when the agent runs inside it already (`with mw.run(id):`)."""
        active = current_run()
        if active is not None and active.run_id == run_id and active.middleware is self._owner:
            return active
        return None

    def _claim(self, run_id: str, invocation: Any) -> tuple[OpenRun, bool, OpenRun | None]:
        """(handle, fresh, stale): the invocation's run, or a new one replacing a stale one."""
        with self._lock:
            handle = self._open.get(run_id)
            if handle is not None and handle.belongs_to(invocation):
                return handle, False, None
            fresh = OpenRun(self._start(run_id), invocation)
            self._open[run_id] = fresh
            return fresh, True, handle

    def _forget(self, run_id: str, handle: OpenRun) -> bool:
        with self._lock:
            if self._open.get(run_id) is handle:
                del self._open[run_id]
                return True
            return False

    def _mine(self, run_id: str, invocation: Any) -> OpenRun | None:
        with self._lock:
            handle = self._open.get(run_id)
            if handle is None or not handle.belongs_to(invocation):
                return None
            del self._open[run_id]
            return handle

    def _watch(self, run_id: str, handle: OpenRun, invocation: Any) -> None:
        if invocation is None:
            return
        _start_closer()
        handle.finalizer = weakref.finalize(invocation, self._finished, run_id, handle)

    def _finished(self, run_id: str, handle: OpenRun) -> None:
        # Called when the invocation's writer is freed, possibly inside the garbage collector:
        # no I/O here, the closer thread does it.
        if self._forget(run_id, handle):
            _CLOSING.put(handle)

    @staticmethod
    def _close_quietly(handle: OpenRun) -> None:
        _close_quietly(handle)

    # -- sync --------------------------------------------------------------------------------
    def get(self, run_id: str, invocation: Any) -> Run:
        """The run of this invocation, opened on first use (closing a stale one first)."""
        active = self._active(run_id)
        if active is not None:
            return active
        handle, fresh, stale = self._claim(run_id, invocation)
        if stale is not None:
            self._close_quietly(stale)
        if not fresh:
            handle.ready.wait()
            return handle.check_ready()
        try:
            handle.open()
        except BaseException:
            self._forget(run_id, handle)
            raise
        self._watch(run_id, handle, invocation)
        return handle.run

    def end(self, run_id: str, invocation: Any, ending: Ending) -> None:
        """Close the run of this invocation, if it has one open."""
        handle = self._mine(run_id, invocation)
        if handle is not None:
            handle.close(ending)

    def drop_stale(self, run_id: str, invocation: Any) -> None:
        """Close a run of `run_id` left open by another invocation."""
        with self._lock:
            handle = self._open.get(run_id)
            if handle is None or handle.belongs_to(invocation):
                return
            del self._open[run_id]
        self._close_quietly(handle)

    # -- async -------------------------------------------------------------------------------
    async def aget(self, run_id: str, invocation: Any) -> Run:
        """Async twin of `get`."""
        active = self._active(run_id)
        if active is not None:
            return active
        handle, fresh, stale = self._claim(run_id, invocation)
        if stale is not None:  # it may come from another event loop: close it synchronously
            await asyncio.to_thread(_close_quietly, stale)
        if not fresh:
            while not handle.ready.is_set():
                await asyncio.sleep(0.001)
            return handle.check_ready()
        try:
            await handle.aopen()
        except BaseException:
            self._forget(run_id, handle)
            raise
        self._watch(run_id, handle, invocation)
        return handle.run

    async def aend(self, run_id: str, invocation: Any, ending: Ending) -> None:
        """Async twin of `end`."""
        handle = self._mine(run_id, invocation)
        if handle is not None:
            await handle.aclose(ending)

    async def adrop_stale(self, run_id: str, invocation: Any) -> None:
        """Async twin of `drop_stale`."""
        with self._lock:
            handle = self._open.get(run_id)
            if handle is None or handle.belongs_to(invocation):
                return
            del self._open[run_id]
        await asyncio.to_thread(_close_quietly, handle)
