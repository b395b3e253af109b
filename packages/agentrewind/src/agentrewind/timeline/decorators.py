"""Timeline decorators: `@checkpointed`, `checkpoint_context`, and `get_timeline` by name."""

from __future__ import annotations

import functools
import inspect
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from ..stores import Store
from . import ops
from .checkpoint import Checkpoint
from .flow import Flow, UserCall
from .safe import as_state, record_failure
from .timeline import Timeline

__all__ = ["CheckpointContext", "checkpoint_context", "checkpointed", "get_timeline"]

F = TypeVar("F", bound=Callable[..., Any])


# -- a registry for decorators that name their timeline ----------------------------------------
_REGISTRY: dict[tuple[str, str], Timeline] = {}
_REGISTRY_LOCK = threading.Lock()


def get_timeline(name: str = "default", store: Store | str | None = None) -> Timeline:
    """Return the process-wide `Timeline` named `name` in `store`, opening it once."""
    where = store.url if isinstance(store, Store) else str(store)
    with _REGISTRY_LOCK:
        tl = _REGISTRY.get((name, where))
        if tl is None:
            tl = _REGISTRY[(name, where)] = Timeline(name, store=store)
        return tl


def _resolve(timeline: Timeline | str, store: Store | str | None) -> Timeline:
    return timeline if not isinstance(timeline, str) else get_timeline(timeline, store)


def _state_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if args and isinstance(args[0], dict):
        return args[0]
    return kwargs.get("state", {})


def _step_flow(
    tl: Timeline,
    name: str,
    max_retries: int,
    auto_rollback: bool,
    call: UserCall,
) -> Flow[Any]:
    """Checkpoint before, retry with rollback on failure, checkpoint the result after."""
    state = _state_of(call.args, call.kwargs)
    pre = yield from ops.checkpoint(
        tl, state, {"step": name, "phase": "pre_execution"}, f"Before: {name}", name
    )
    for attempt in range(max_retries):
        started = time.perf_counter()
        try:
            result = yield call
        except Exception as exc:
            yield from record_failure(tl, state, name, exc, attempt + 1)
            if auto_rollback:
                yield from ops.rollback(tl, to_checkpoint_id=pre.id)
            if attempt + 1 >= max_retries:
                raise
            continue
        meta = {
            "step": name,
            "phase": "post_execution",
            "duration_ms": round((time.perf_counter() - started) * 1000, 3),
            "attempt": attempt + 1,
        }
        yield from ops.checkpoint(tl, as_state(result), meta, f"After: {name}", f"{name}:done")
        return result
    raise AssertionError("unreachable: checkpointed() checks max_retries >= 1")  # pragma: no cover


def checkpointed(
    name: str | None = None,
    *,
    timeline: Timeline | str = "default",
    store: Store | str | None = None,
    max_retries: int = 1,
    auto_rollback: bool = True,
) -> Callable[[F], F]:
    """Decorate a function (sync or async) so each call is checkpointed on a timeline.

    The state is the first positional argument when it is a dict, else the `state` keyword.
    A checkpoint is written before the call and one with the result after it; a call that
    raises is written as a failed checkpoint, the head rolls back to the "before" checkpoint,
    and the call is retried up to `max_retries` attempts in total before the error propagates.
    For an async function the checkpoints are written with the store's async methods.

    Args:
        name: Step name (default: the function's qualified name).
        timeline: A `Timeline`, or the name of a process-wide one (see `get_timeline`).
        store: Store of a timeline given by name (default store when None).
        max_retries: Attempts per call.
        auto_rollback: Roll the head back to the "before" checkpoint after a failure.

    Raises:
        ValueError: `max_retries` is below 1.
    """
    if max_retries < 1:
        raise ValueError(f"max_retries must be >= 1, not {max_retries}")

    def decorate(fn: F) -> F:
        label = name or fn.__qualname__

        def flow(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Timeline, Flow[Any]]:
            tl = _resolve(timeline, store)
            call = UserCall(fn, args, kwargs)
            return tl, _step_flow(tl, label, max_retries, auto_rollback, call)

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                tl, steps = flow(args, kwargs)
                return await tl._runner.arun(steps)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            tl, steps = flow(args, kwargs)
            return tl._runner.run(steps)

        return wrapper  # type: ignore[return-value]

    return decorate


class CheckpointContext:
    """`with checkpoint_context(...) as ctx:` edit `ctx.state`; it is checkpointed on success.

    On enter the block's starting state (`state`, else the timeline's current state, else {})
    is checkpointed; an exception rolls the head back to that checkpoint and propagates.
    Works with `with` and `async with`.
    """

    def __init__(self, tl: Timeline, description: str, state: Any) -> None:
        self.timeline = tl
        self.description = description
        self._initial = state
        self.state: Any = None
        self.start: Checkpoint | None = None
        self.end: Checkpoint | None = None

    def _enter(self) -> Flow[CheckpointContext]:
        current = self.timeline.get_state() if self._initial is None else self._initial
        self.start = yield from ops.checkpoint(
            self.timeline,
            {} if current is None else current,
            None,
            f"Context start: {self.description}",
            self.description,
        )
        self.state = self.start.state
        return self

    def _exit(self, exc: BaseException | None) -> Flow[None]:
        assert self.start is not None
        tl = self.timeline
        if exc is not None:
            if isinstance(exc, Exception):
                yield from record_failure(tl, self.state, self.description, exc, 1)
            yield from ops.rollback(tl, to_checkpoint_id=self.start.id)
            return
        self.end = yield from ops.checkpoint(
            tl, self.state, None, f"Context complete: {self.description}",
            f"{self.description}:done",
        )  # fmt: skip

    def __enter__(self) -> CheckpointContext:
        return self.timeline._runner.run(self._enter())

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        self.timeline._runner.run(self._exit(exc))

    async def __aenter__(self) -> CheckpointContext:
        return await self.timeline._runner.arun(self._enter())

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        await self.timeline._runner.arun(self._exit(exc))


def checkpoint_context(
    description: str = "",
    *,
    timeline: Timeline | str = "default",
    store: Store | str | None = None,
    state: Any = None,
) -> CheckpointContext:
    """Checkpoint a block of code: its start, and its `ctx.state` when it succeeds.

    Args:
        description: What the block does.
        timeline: A `Timeline` or the name of a process-wide one.
        store: Store of a timeline given by name.
        state: The starting state (default: the timeline's current state).
    """
    return CheckpointContext(_resolve(timeline, store), description, state)
