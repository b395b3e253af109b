"""`safe_execute`, the `@agentrewind.step` decorator and `checkpoint_context` for timelines."""

from __future__ import annotations

import copy
import functools
import inspect
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import AgentRewindError

if TYPE_CHECKING:
    from .recovery import RecoveryStrategy
    from .stores import Store
    from .timeline import Checkpoint, Timeline

__all__ = ["RecoveryError", "checkpoint_context", "get_timeline", "safe_execute", "step"]

F = TypeVar("F", bound=Callable[..., Any])


class RecoveryError(AgentRewindError, RuntimeError):
    """Every attempt (and the fallback) of a `safe_execute` or `@step` failed.

    Attributes:
        checkpoint_id: The checkpoint the timeline was rolled back to.
        attempts: How many attempts ran.
    """

    def __init__(self, message: str, checkpoint_id: str, attempts: int) -> None:
        super().__init__(message)
        self.checkpoint_id = checkpoint_id
        self.attempts = attempts


def _as_state(result: Any) -> Any:
    return result if isinstance(result, dict) else {"result": result}


def _failed(tl: Timeline, state: Any, description: str, exc: BaseException, attempt: int) -> None:
    tl.metrics["errors_caught"] += 1
    error = f"{type(exc).__name__}: {exc}"
    tl._commit(
        state,
        {"operation": description, "status": "failed", "error": error, "attempt": attempt},
        f"Failed (attempt {attempt}): {description}",
        f"{description}:fail:{attempt}",
        failed=True,
    )


def safe_execute(
    tl: Timeline,
    func: Callable[[Any], Any],
    state: Any,
    description: str = "",
    max_retries: int = 3,
    fallback: Callable[[Any], Any] | None = None,
    strategy: RecoveryStrategy | None = None,
) -> tuple[Any, Checkpoint]:
    """Implementation of `Timeline.safe_execute` (see there)."""
    if max_retries < 1:
        raise ValueError(f"max_retries must be >= 1, not {max_retries}")
    pre = tl.checkpoint(
        state,
        {"operation": description, "status": "attempting"},
        f"Pre-execution: {description}",
        description,
    )
    last: BaseException | None = None
    attempts = 0
    for attempt in range(max_retries):
        attempts += 1
        try:
            result = func(copy.deepcopy(state))
        except Exception as exc:
            last = exc
            _failed(tl, state, description, exc, attempt + 1)
            tl.rollback(to_checkpoint_id=pre.id)
            if strategy is not None and attempt + 1 < max_retries:
                changed = strategy.apply(state, exc, attempt)
                if changed is None:
                    break
                state = changed
            continue
        done = tl.checkpoint(
            _as_state(result),
            {"operation": description, "status": "success", "attempt": attempt + 1},
            f"Completed: {description}",
            f"{description}:success",
        )
        return result, done
    if fallback is not None:
        home = tl.current_branch
        tl.branch(f"fallback-{pre.id[-8:]}", from_checkpoint_id=pre.id)
        try:
            result = fallback(copy.deepcopy(state))
        except Exception as exc:
            _failed(tl, state, f"{description} (fallback)", exc, attempts + 1)
            tl.switch_branch(home)
            raise RecoveryError(
                f"operation {description!r} failed after {attempts} attempt(s) and its "
                f"fallback failed too ({type(exc).__name__}: {exc}); the timeline is at "
                f"checkpoint {pre.id}",
                pre.id,
                attempts,
            ) from exc
        tl.checkpoint(
            _as_state(result),
            {"operation": description, "status": "fallback_success", "original_error": str(last)},
            f"Fallback succeeded: {description}",
            f"{description}:fallback",
        )
        explored = tl.current_branch
        tl.switch_branch(home)
        merged = tl.merge(explored, strategy="theirs")
        tl.metrics["total_recoveries"] += 1
        return result, merged
    raise RecoveryError(
        f"operation {description!r} failed after {attempts} attempt(s) "
        f"(last error {type(last).__name__}: {last}); rolled back to checkpoint {pre.id}",
        pre.id,
        attempts,
    ) from last


# -- a registry for decorators that name their timeline ----------------------------------------
_REGISTRY: dict[tuple[str, str], Timeline] = {}
_REGISTRY_LOCK = threading.Lock()


def get_timeline(name: str = "default", store: Store | str | None = None) -> Timeline:
    """Return the process-wide `Timeline` named `name` in `store`, opening it once."""
    from .stores import Store as _Store
    from .timeline import Timeline

    where = store.url if isinstance(store, _Store) else str(store)
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


class _StepRunner:
    """Checkpoint before, retry with rollback on failure, checkpoint the result after."""

    def __init__(self, tl: Timeline, name: str, max_retries: int, auto_rollback: bool) -> None:
        self.tl, self.name = tl, name
        self.max_retries, self.auto_rollback = max_retries, auto_rollback

    def before(self, state: Any) -> Checkpoint:
        return self.tl.checkpoint(
            state, {"step": self.name, "phase": "pre_execution"}, f"Before: {self.name}", self.name
        )

    def failed(self, pre: Checkpoint, state: Any, exc: BaseException, attempt: int) -> None:
        _failed(self.tl, state, self.name, exc, attempt + 1)
        if self.auto_rollback:
            self.tl.rollback(to_checkpoint_id=pre.id)

    def after(self, result: Any, started: float, attempt: int) -> None:
        meta = {
            "step": self.name,
            "phase": "post_execution",
            "duration_ms": round((time.perf_counter() - started) * 1000, 3),
            "attempt": attempt + 1,
        }
        self.tl.checkpoint(_as_state(result), meta, f"After: {self.name}", f"{self.name}:done")


def step(
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

    Args:
        name: Step name (default: the function's qualified name).
        timeline: A `Timeline`, or the name of a process-wide one (see `get_timeline`).
        store: Store of a timeline given by name (default store when None).
        max_retries: Attempts per call.
        auto_rollback: Roll the head back to the "before" checkpoint after a failure.
    """

    def decorate(fn: F) -> F:
        label = name or fn.__qualname__

        def runner() -> _StepRunner:
            return _StepRunner(_resolve(timeline, store), label, max_retries, auto_rollback)

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                r, state = runner(), _state_of(args, kwargs)
                pre = r.before(state)
                for attempt in range(max_retries):
                    started = time.perf_counter()
                    try:
                        result = await fn(*args, **kwargs)
                    except Exception as exc:
                        r.failed(pre, state, exc, attempt)
                        if attempt + 1 >= max_retries:
                            raise
                        continue
                    r.after(result, started, attempt)
                    return result
                raise AssertionError("unreachable")  # pragma: no cover

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            r, state = runner(), _state_of(args, kwargs)
            pre = r.before(state)
            for attempt in range(max_retries):
                started = time.perf_counter()
                try:
                    result = fn(*args, **kwargs)
                except Exception as exc:
                    r.failed(pre, state, exc, attempt)
                    if attempt + 1 >= max_retries:
                        raise
                    continue
                r.after(result, started, attempt)
                return result
            raise AssertionError("unreachable")  # pragma: no cover

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

    def __enter__(self) -> CheckpointContext:
        current = self.timeline.get_state() if self._initial is None else self._initial
        self.start = self.timeline.checkpoint(
            {} if current is None else current,
            description=f"Context start: {self.description}",
            logic_step=self.description,
        )
        self.state = self.start.state
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        assert self.start is not None
        if exc is not None:
            if isinstance(exc, Exception):
                _failed(self.timeline, self.state, self.description, exc, 1)
            self.timeline.rollback(to_checkpoint_id=self.start.id)
            return
        self.end = self.timeline.checkpoint(
            self.state,
            description=f"Context complete: {self.description}",
            logic_step=f"{self.description}:done",
        )

    async def __aenter__(self) -> CheckpointContext:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.__exit__(exc_type, exc, tb)


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
