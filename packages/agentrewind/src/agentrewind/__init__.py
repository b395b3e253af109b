"""agentrewind: make AI agents survive failure.

Record every LLM call, tool call and framework step of a run into SQLite or Redis; resume a
failed run with the same id and what finished replays (no tokens spent, no tool re-run).
"""

from __future__ import annotations

from ._context import current_run, idempotency_key
from ._diff import diff_states
from ._events import Subscription, TimelineEvent
from ._safe import CheckpointContext, RecoveryError, checkpoint_context, get_timeline, step
from .document import (
    DocumentError,
    RunDocument,
    RunNotFoundError,
    ValidationIssue,
    emit,
    export_run,
    fork_run,
    import_run,
    parse,
    resume_from,
    validate,
)
from .errors import (
    AdapterNotFoundError,
    AgentRewindError,
    CorruptRecordError,
    DivergenceError,
    DivergenceWarning,
    IncompleteStepError,
    RecordedStepError,
    RunLockedError,
    SchemaVersionError,
    SerializationError,
    StoreBusyError,
    StoreError,
    StoreUnavailableError,
)
from .journal import Call, CallEvent, Run
from .middleware import Middleware, RunContext
from .records import RunInfo, RunMetrics, StepRecord
from .recovery import (
    AlternativePathStrategy,
    CompositeStrategy,
    DegradeGracefully,
    RecoveryStrategy,
    Retry,
    RetryWithBackoff,
)
from .serde import Codec, Serializer, register_codec
from .stores import MemoryStore, SQLiteStore, Store, connect
from .timeline import Branch, Checkpoint, Timeline, TimelineError

__version__ = "0.1.0"

__all__ = [
    "AdapterNotFoundError",
    "AgentRewindError",
    "AlternativePathStrategy",
    "Branch",
    "Call",
    "CallEvent",
    "Checkpoint",
    "CheckpointContext",
    "Codec",
    "CompositeStrategy",
    "CorruptRecordError",
    "DegradeGracefully",
    "DivergenceError",
    "DivergenceWarning",
    "DocumentError",
    "IncompleteStepError",
    "MemoryStore",
    "Middleware",
    "RecordedStepError",
    "RecoveryError",
    "RecoveryStrategy",
    "Retry",
    "RetryWithBackoff",
    "Run",
    "RunContext",
    "RunDocument",
    "RunInfo",
    "RunLockedError",
    "RunMetrics",
    "RunNotFoundError",
    "SQLiteStore",
    "SchemaVersionError",
    "SerializationError",
    "Serializer",
    "StepRecord",
    "Store",
    "StoreBusyError",
    "StoreError",
    "StoreUnavailableError",
    "Subscription",
    "Timeline",
    "TimelineError",
    "TimelineEvent",
    "ValidationIssue",
    "__version__",
    "checkpoint_context",
    "connect",
    "current_run",
    "diff_states",
    "emit",
    "export_run",
    "fork_run",
    "get_timeline",
    "idempotency_key",
    "import_run",
    "parse",
    "register_codec",
    "resume_from",
    "step",
    "validate",
]
