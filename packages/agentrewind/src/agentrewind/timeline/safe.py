"""`safe_execute`: run a function on a timeline with checkpoints, retries, rollback and fallback."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from ..errors import AgentRewindError
from . import ops
from .base import TimelineBase
from .checkpoint import Checkpoint
from .flow import Flow, UserCall, Wait
from .merge import merge
from .recovery import RecoveryStrategy

__all__ = ["RecoveryError", "as_state", "record_failure", "safe_execute"]


class RecoveryError(AgentRewindError, RuntimeError):
    """Every attempt (and the fallback) of a `safe_execute` or `@checkpointed` failed.

    Attributes:
        checkpoint_id: The checkpoint the timeline was rolled back to.
        attempts: How many attempts ran.
    """

    def __init__(self, message: str, checkpoint_id: str, attempts: int) -> None:
        super().__init__(message)
        self.checkpoint_id = checkpoint_id
        self.attempts = attempts


def as_state(result: Any) -> Any:
    """A function's result as a checkpoint state (a dict is kept, else `{"result": ...}`)."""
    return result if isinstance(result, dict) else {"result": result}


def record_failure(
    tl: TimelineBase, state: Any, description: str, exc: BaseException, attempt: int
) -> Flow[Checkpoint]:
    """Write a failed attempt as a failed checkpoint (and count it)."""
    tl.metrics["errors_caught"] += 1
    error = f"{type(exc).__name__}: {exc}"
    return ops.checkpoint(
        tl,
        state,
        {"operation": description, "status": "failed", "error": error, "attempt": attempt},
        f"Failed (attempt {attempt}): {description}",
        f"{description}:fail:{attempt}",
        failed=True,
    )


def safe_execute(
    tl: TimelineBase,
    func: Callable[[Any], Any],
    state: Any,
    description: str = "",
    max_retries: int = 3,
    fallback: Callable[[Any], Any] | None = None,
    strategy: RecoveryStrategy | None = None,
) -> Flow[tuple[Any, Checkpoint]]:
    """The flow of `Timeline.safe_execute` and `asafe_execute` (see there)."""
    if max_retries < 1:
        raise ValueError(f"max_retries must be >= 1, not {max_retries}")
    pre = yield from ops.checkpoint(
        tl,
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
            result = yield UserCall(func, (copy.deepcopy(state),))
        except Exception as exc:
            last = exc
            yield from record_failure(tl, state, description, exc, attempt + 1)
            yield from ops.rollback(tl, to_checkpoint_id=pre.id)
            if strategy is not None and attempt + 1 < max_retries:
                retry = strategy.plan(state, exc, attempt)
                if retry is None:
                    break
                if retry.delay > 0:
                    yield Wait(retry.delay, retry.sleep)
                state = retry.state
            continue
        done = yield from ops.checkpoint(
            tl,
            as_state(result),
            {"operation": description, "status": "success", "attempt": attempt + 1},
            f"Completed: {description}",
            f"{description}:success",
        )
        return result, done
    if fallback is None:
        raise RecoveryError(
            f"operation {description!r} failed after {attempts} attempt(s) "
            f"(last error {type(last).__name__}: {last}); rolled back to checkpoint {pre.id}",
            pre.id,
            attempts,
        ) from last
    home = tl.current_branch
    yield from ops.branch(tl, f"fallback-{pre.id[-8:]}", from_checkpoint_id=pre.id)
    try:
        result = yield UserCall(fallback, (copy.deepcopy(state),))
    except Exception as exc:
        yield from record_failure(tl, state, f"{description} (fallback)", exc, attempts + 1)
        yield from ops.switch_branch(tl, home)
        raise RecoveryError(
            f"operation {description!r} failed after {attempts} attempt(s) and its "
            f"fallback failed too ({type(exc).__name__}: {exc}); the timeline is at "
            f"checkpoint {pre.id}",
            pre.id,
            attempts,
        ) from exc
    yield from ops.checkpoint(
        tl,
        as_state(result),
        {"operation": description, "status": "fallback_success", "original_error": str(last)},
        f"Fallback succeeded: {description}",
        f"{description}:fallback",
    )
    explored = tl.current_branch
    yield from ops.switch_branch(tl, home)
    merged = yield from merge(tl, explored, "theirs")
    tl.metrics["total_recoveries"] += 1
    return result, merged
