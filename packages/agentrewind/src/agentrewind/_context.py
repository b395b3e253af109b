"""Context variables: the active run and the call currently executing."""

from __future__ import annotations

import hashlib
from contextvars import ContextVar
from typing import TYPE_CHECKING

from .errors import AgentRewindError

if TYPE_CHECKING:
    from .journal import Call, Run

CURRENT_RUN: ContextVar[Run | None] = ContextVar("agentrewind_run", default=None)
CURRENT_CALL: ContextVar[Call | None] = ContextVar("agentrewind_call", default=None)


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
