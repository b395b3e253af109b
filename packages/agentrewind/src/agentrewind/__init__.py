"""agentrewind: make AI agents survive failure.

Record every LLM call, tool call and framework step of a run into SQLite or Redis; resume a
failed run with the same id and what finished replays (no tokens spent, no tool re-run).
"""

from __future__ import annotations

from ._context import current_run, idempotency_key
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
from .serde import Codec, Serializer, register_codec
from .stores import MemoryStore, SQLiteStore, Store, connect

__version__ = "0.1.0"

__all__ = [
    "AdapterNotFoundError",
    "AgentRewindError",
    "Call",
    "CallEvent",
    "Codec",
    "CorruptRecordError",
    "DivergenceError",
    "DivergenceWarning",
    "IncompleteStepError",
    "MemoryStore",
    "Middleware",
    "RecordedStepError",
    "Run",
    "RunContext",
    "RunInfo",
    "RunLockedError",
    "RunMetrics",
    "SQLiteStore",
    "SchemaVersionError",
    "SerializationError",
    "Serializer",
    "StepRecord",
    "Store",
    "StoreBusyError",
    "StoreError",
    "StoreUnavailableError",
    "__version__",
    "connect",
    "current_run",
    "idempotency_key",
    "register_codec",
]
