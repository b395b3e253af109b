"""agentrewind for LangGraph: `RewindSaver`, a drop-in checkpointer on SQLite, Redis and Cluster."""

from .migrate import migrate_sqlite_saver
from .saver import RewindSaver

__all__ = ["RewindSaver", "migrate_sqlite_saver"]
