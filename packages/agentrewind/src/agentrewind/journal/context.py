"""The run active in this context, and the idempotency key of the call executing now."""

from __future__ import annotations

import hashlib
from contextvars import ContextVar

from ..errors import AgentRewindError
from .call import CURRENT_CALL
from .run import Run

__all__ = ["CURRENT_RUN", "current_run", "idempotency_key"]

CURRENT_RUN: ContextVar[Run | None] = ContextVar("agentrewind_run", default=None)
"""The run opened by the innermost `middleware.run()` (or a wrapped object) in this context."""


def current_run() -> Run | None:
    """Return the run active in this context (thread or task), or None."""
    return CURRENT_RUN.get()


def idempotency_key() -> str:
    """Return a stable key for the step executing now: the same on every retry and resume.

    Pass it downstream (payment APIs, emails, queues) so a step that is re-run after a crash
    does not repeat its effect there.

    Raises:
        AgentRewindError: Called outside a recorded step.
    """
    call = CURRENT_CALL.get()
    if call is None:
        raise AgentRewindError("idempotency_key() must be called inside a recorded step")
    return hashlib.sha256(f"{call.run.run_id}\x00{call.key}".encode()).hexdigest()[:32]
