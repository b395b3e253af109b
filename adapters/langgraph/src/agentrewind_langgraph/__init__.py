"""agentrewind for LangGraph: `RewindSaver`, a drop-in checkpointer on SQLite, Redis, Postgres."""

from ._serde import SafeSerializer, UnsafeCheckpointError
from .migrate import migrate_postgres_saver, migrate_sqlite_saver
from .saver import RewindSaver

__all__ = [
    "RewindSaver",
    "SafeSerializer",
    "UnsafeCheckpointError",
    "migrate_postgres_saver",
    "migrate_sqlite_saver",
]
