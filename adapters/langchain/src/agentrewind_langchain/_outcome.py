"""Running a decided call and journaling what it returned, shared by every funnel.

As in the core journal, what to record is decided by pure functions (`Outcome`), and the
store I/O happens in thin sync/async wrappers: `execute`/`aexecute` run the real call
between `start` and `fail`, `settle`/`asettle` write the decided outcome.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, TypeVar

from agentrewind import Call, SerializationError

__all__ = ["Outcome", "aexecute", "asettle", "execute", "settle"]

logger = logging.getLogger("agentrewind.langchain")

T = TypeVar("T")


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    """What a finished call leaves in the journal.

    Attributes:
        value: The output to complete the call with (when `failure` is None and `record`).
        meta: Meta of the completed record (e.g. `tokens`).
        failure: Mark the call failed with this error instead (it runs again on resume).
        record: False: write nothing (the call runs again on resume).
        what: The log line for an output that cannot be stored (`{key}`: the call key).
        parts: `(digest, path)` of messages in the output a later prompt may repeat
            (`Call.produced`): such a prompt refers to them instead of storing them again.
    """

    value: Any = None
    meta: dict[str, Any] | None = None
    failure: BaseException | None = None
    record: bool = True
    what: str = "call {key} not journaled"
    parts: tuple[tuple[bytes, list[Any]], ...] = ()


def _tracked(call: Call, track: bool) -> AbstractContextManager[None]:
    return call.executing() if track else nullcontext()


def execute(call: Call, fn: Callable[[], T], *, track: bool = True) -> T:
    """Mark `call` started, run `fn`, and note a raised error as the call's failure.

    Args:
        call: A call that did not hit.
        fn: The real call.
        track: Run `fn` inside `call.executing()` (so `idempotency_key()` sees the call).
    """
    call.start()
    with _tracked(call, track):
        try:
            return fn()
        except BaseException as exc:
            call.fail(exc)
            raise


async def aexecute(call: Call, fn: Callable[[], Awaitable[T]], *, track: bool = True) -> T:
    """Async twin of `execute`."""
    await call.astart()
    with _tracked(call, track):
        try:
            return await fn()
        except BaseException as exc:
            await call.afail(exc)
            raise


def _unstorable(call: Call, outcome: Outcome, exc: SerializationError) -> None:
    logger.warning("agentrewind: %s: %s", outcome.what.format(key=call.key), exc)


def settle(call: Call, outcome: Outcome) -> None:
    """Journal `outcome`; an unstorable value is logged and left to run again on resume."""
    if outcome.failure is not None:
        call.fail(outcome.failure)
    elif outcome.record:
        for digest, path in outcome.parts:
            call.produced(digest, path)
        try:
            call.complete(outcome.value, outcome.meta)
        except SerializationError as exc:
            _unstorable(call, outcome, exc)


async def asettle(call: Call, outcome: Outcome) -> None:
    """Async twin of `settle`."""
    if outcome.failure is not None:
        await call.afail(outcome.failure)
    elif outcome.record:
        for digest, path in outcome.parts:
            call.produced(digest, path)
        try:
            await call.acomplete(outcome.value, outcome.meta)
        except SerializationError as exc:
            _unstorable(call, outcome, exc)
