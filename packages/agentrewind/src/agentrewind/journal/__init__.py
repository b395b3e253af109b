"""The journal: record each call of a run and replay what finished when the run resumes.

`Middleware` opens runs (`Run`), whose calls (`Call`) are keyed by content and recorded in a
store; a lease keeps one owner per run, and the context variables find the run in progress.
"""

from .call import Call, CallEvent
from .context import current_run, idempotency_key
from .lifecycle import RecoveryOutcome, RecoveryReport
from .middleware import Adapter, Middleware, RunContext
from .run import IncompletePolicy, Run
from .steps import step
from .workflow import Workflow

__all__ = [
    "Adapter",
    "Call",
    "CallEvent",
    "IncompletePolicy",
    "Middleware",
    "RecoveryOutcome",
    "RecoveryReport",
    "Run",
    "RunContext",
    "Workflow",
    "current_run",
    "idempotency_key",
    "step",
]
