"""agentrewind for LangGraph: `RewindSaver`, a drop-in checkpointer on SQLite, Redis and Cluster."""

from ._serde import SafeSerializer, UnsafeCheckpointError
from .migrate import migrate_sqlite_saver
from .saver import RewindSaver

__all__ = ["RewindSaver", "SafeSerializer", "UnsafeCheckpointError", "migrate_sqlite_saver"]
