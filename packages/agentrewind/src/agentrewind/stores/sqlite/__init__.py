"""The SQLite store (stdlib `sqlite3`): the store, its connection helper and migrations.

`db` holds the connection helper and migration runner that an adapter shares when it keeps
its own tables in the same file (the LangGraph saver does); `_sql` holds the statements.
"""

from __future__ import annotations

from .db import SQLiteDatabase, apply_migrations
from .store import SQLiteStore

__all__ = ["SQLiteDatabase", "SQLiteStore", "apply_migrations"]
