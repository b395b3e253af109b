"""Human-in-the-loop answers are journaled calls: a rerun of the run reuses them.

`ctx.wait_for_event` is hooked (class level, inert outside a journaled run). When it returns
the answer a waiting step was given, the answer is recorded as a `custom` call keyed by what
was asked (the awaited event type, the waiter id, its requirements and the `waiter_event`, so
a changed question asks again). When the same question is asked again in the same run, because
the run resumed before the asking step's result was journaled, or because a completed run id
is run again from scratch, the recorded answer is returned at once: the question is neither
streamed again nor waited for.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from workflows.context.internal_context import InternalContext

import agentrewind

from ._keys import plain
from ._state import current_invocation

__all__ = ["install_wait_hook"]

_MARK = "__agentrewind_wait_hook__"
_KIND, _NAME = "custom", "human_response"


def _journal_of(ctx: InternalContext[Any]) -> Any:
    """The `RunState` of the journaled run this step context belongs to, or None."""
    adapter = getattr(ctx, "_internal_adapter", None)
    return getattr(adapter, "_state", None)


def _hook(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    async def wait_for_event(
        self: InternalContext[Any],
        event_type: type[Any],
        waiter_event: Any = None,
        waiter_id: str | None = None,
        requirements: dict[str, Any] | None = None,
        timeout: float | None = 2000,
    ) -> Any:
        run = agentrewind.current_run()
        state = _journal_of(self)
        if run is None or state is None:
            return await orig(self, event_type, waiter_event, waiter_id, requirements, timeout)
        key = {
            "event": f"{event_type.__module__}.{event_type.__qualname__}",
            "waiter_id": waiter_id,
            "requirements": plain(requirements or {}),
            "asked": plain(waiter_event),
        }
        base = f"{_KIND}:{_NAME}:{run.digest(key)}"
        answered = state.answers.get(base, 0)
        recorded = {r.key for r in run.records() if r.status == "completed"}
        if f"{base}#{answered}" in recorded:
            call = run.begin(_KIND, _NAME, key)
            if call.hit:
                state.answers[base] = answered + 1
                return state.serializer.deserialize(call.value())
        event = await orig(self, event_type, waiter_event, waiter_id, requirements, timeout)
        call = run.begin(_KIND, _NAME, key)
        state.answers[base] = answered + 1
        if not call.hit:
            meta = {"invocation": current_invocation()}
            await call.acomplete(state.serializer.serialize(event), meta)
        return event

    return wait_for_event


def install_wait_hook() -> None:
    """Hook `wait_for_event` of the step context (idempotent)."""
    orig = InternalContext.__dict__["wait_for_event"]
    if getattr(orig, _MARK, False):
        return
    wrapper = _hook(orig)
    setattr(wrapper, _MARK, True)
    InternalContext.wait_for_event = wrapper  # type: ignore[method-assign]
