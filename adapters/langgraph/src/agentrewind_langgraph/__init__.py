"""agentrewind for LangGraph: `RewindSaver`, a drop-in checkpointer on SQLite, Redis, Postgres.

The names load on first use (PEP 562), so the CLI's run source (`agentrewind_langgraph.runs`)
can be imported without importing LangGraph.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .migrate import migrate_postgres_saver, migrate_sqlite_saver
    from .saver import RewindSaver

__all__ = ["RewindSaver", "migrate_postgres_saver", "migrate_sqlite_saver"]


def __getattr__(name: str) -> Any:
    if name == "RewindSaver":
        from .saver import RewindSaver

        return RewindSaver
    if name in ("migrate_sqlite_saver", "migrate_postgres_saver"):
        from . import migrate

        return getattr(migrate, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
