"""The SQLite connection helper and migration runner, at their 0.x import path.

They live in `agentrewind.stores.sqlite` (with the SQLite store); adapters import them from
`agentrewind.adapters`.
"""

from __future__ import annotations

from .sqlite.db import SQLiteDatabase, apply_migrations

__all__ = ["SQLiteDatabase", "apply_migrations"]
