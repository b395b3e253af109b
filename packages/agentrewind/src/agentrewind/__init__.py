"""agentrewind: make AI agents survive failure.

Record every LLM call, tool call and framework step of a run into SQLite or Redis; resume a
failed run with the same id and what finished replays (no tokens spent, no tool re-run).
"""

from __future__ import annotations

import sys as _sys

from .diff import diff_states
from .documents import (
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
    CheckpointCycleError,
    CorruptRecordError,
    DataLostError,
    DecryptionError,
    DivergenceError,
    DivergenceWarning,
    IncompleteStepError,
    LeaseLostError,
    RecordedStepError,
    RedisPersistenceWarning,
    RunLockedError,
    SchemaVersionError,
    SerializationError,
    StoreBusyError,
    StoreClosedError,
    StoreError,
    StoreUnavailableError,
)
from .journal import (
    Call,
    CallEvent,
    Middleware,
    Run,
    RunContext,
    current_run,
    idempotency_key,
    step,
)
from .records import RunInfo, RunMetrics, StepRecord
from .serde import Codec, Serializer, register_codec
from .serde import encryption as _encryption
from .stores import MemoryStore, PruneResult, SQLiteStore, Store, connect
from .timeline import (
    AlternativePathStrategy,
    Branch,
    Checkpoint,
    CheckpointContext,
    CompositeStrategy,
    DegradeGracefully,
    RecoveryError,
    RecoveryStrategy,
    Retry,
    RetryWithBackoff,
    Subscription,
    Timeline,
    TimelineError,
    TimelineEvent,
    checkpoint_context,
    checkpointed,
    get_timeline,
)

__version__ = "0.1.0"

# `agentrewind.encryption`, the 0.1 import path of `agentrewind.serde.encryption`, still imports.
_sys.modules.setdefault(f"{__name__}.encryption", _encryption)

__all__ = [
    "AdapterNotFoundError",
    "AgentRewindError",
    "AlternativePathStrategy",
    "Branch",
    "Call",
    "CallEvent",
    "Checkpoint",
    "CheckpointContext",
    "CheckpointCycleError",
    "Codec",
    "CompositeStrategy",
    "CorruptRecordError",
    "DataLostError",
    "DecryptionError",
    "DegradeGracefully",
    "DivergenceError",
    "DivergenceWarning",
    "DocumentError",
    "IncompleteStepError",
    "LeaseLostError",
    "MemoryStore",
    "Middleware",
    "PruneResult",
    "RecordedStepError",
    "RecoveryError",
    "RecoveryStrategy",
    "RedisPersistenceWarning",
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
    "StoreClosedError",
    "StoreError",
    "StoreUnavailableError",
    "Subscription",
    "Timeline",
    "TimelineError",
    "TimelineEvent",
    "ValidationIssue",
    "__version__",
    "checkpoint_context",
    "checkpointed",
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
