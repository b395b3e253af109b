"""agentrewind for LangGraph: `RewindSaver`, a drop-in checkpointer on SQLite, Redis, Postgres.

The names load on first use (PEP 562), so the CLI's run source (`agentrewind_langgraph.runs`)
can be imported without importing LangGraph.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._serde import SafeSerializer, UnsafeCheckpointError
    from .cache import RewindCache
    from .migrate import migrate_postgres_saver, migrate_sqlite_saver
    from .saver import RewindSaver

__all__ = [
    "RewindCache",
    "RewindSaver",
    "SafeSerializer",
    "UnsafeCheckpointError",
    "migrate_postgres_saver",
    "migrate_sqlite_saver",
]

_WHERE = {
    "RewindCache": ".cache",
    "RewindSaver": ".saver",
    "SafeSerializer": "._serde",
    "UnsafeCheckpointError": "._serde",
    "migrate_postgres_saver": ".migrate",
    "migrate_sqlite_saver": ".migrate",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        from importlib import import_module

        return getattr(import_module(_WHERE[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
