"""Opening what a `RewindSaver` writes to: its store URL, and the backend for the store."""

from __future__ import annotations

import random
import tempfile
import threading
from pathlib import Path
from typing import Any

import agentrewind
from agentrewind.adapters import Store

__all__ = ["memory_sqlite", "next_version", "open_backend", "open_store", "url_of"]

_MEMORY_FILES: dict[str, str] = {}
_MEMORY_LOCK = threading.Lock()


def memory_sqlite(store: Store) -> Store:
    """A SQLite file standing in for `memory://NAME` (shared by name within this process)."""
    from agentrewind.adapters import SQLiteStore

    name = store.url.split("://", 1)[1] or f"anon-{id(store)}"
    with _MEMORY_LOCK:
        path = _MEMORY_FILES.get(name)
        if path is None:
            path = str(Path(tempfile.mkdtemp(prefix="agentrewind-lg-")) / "memory.db")
            _MEMORY_FILES[name] = path
    return SQLiteStore(path, namespace=store.namespace)


def url_of(conn_string: str | None) -> str | None:
    """A store URL for `conn_string`: a plain file path means SQLite, `:memory:` memory."""
    if conn_string is None or "://" in conn_string:
        return conn_string
    if conn_string == ":memory:":
        return "memory://"
    return "sqlite:///" + str(Path(conn_string).expanduser().resolve())


def open_store(store_or_url: Any, namespace: str | None) -> tuple[Store, bool]:
    """The store a saver writes to, and whether the saver opened it (and closes it).

    A `Store` is used as is; a `psycopg_pool.AsyncConnectionPool` (its `conninfo` a
    `postgresql://` URL) opens a PostgreSQL store whose async API runs on that pool (left
    open) and whose sync API on a pool of its own; anything else is a URL or file path.
    """
    if isinstance(store_or_url, Store):
        return store_or_url, False
    if type(store_or_url).__name__ == "AsyncConnectionPool":
        url = str(getattr(store_or_url, "conninfo", ""))
        if not url.startswith(("postgresql://", "postgres://")):
            raise ValueError(
                "RewindSaver(AsyncConnectionPool) needs a pool whose conninfo is a "
                "postgresql:// URL; else pass PostgresStore(conninfo, async_pool=pool)"
            )
        return agentrewind.connect(url, namespace=namespace, async_pool=store_or_url), True
    return agentrewind.connect(url_of(store_or_url), namespace=namespace), True


def open_backend(store: Store, tombstone_ttl: float) -> Any:
    """The backend that keeps LangGraph threads in `store` (SQLite, Redis or PostgreSQL)."""
    if store.scheme == "redis":
        from .redis.backend import RedisBackend

        return RedisBackend(store, tombstone_ttl=tombstone_ttl)
    if store.scheme == "postgresql":
        from .postgres.backend import PostgresBackend

        return PostgresBackend(store, tombstone_ttl=tombstone_ttl)
    from .sqlite.backend import SQLiteBackend

    return SQLiteBackend(store, tombstone_ttl=tombstone_ttl)


def next_version(current: str | int | None) -> str:
    """The channel version after `current` (see `RewindSaver.get_next_version`)."""
    if current is None:
        n, width = 0, 10
    elif isinstance(current, int):
        n, width = current, 10
    else:
        head = str(current).split(".", 1)[0]
        n, width = int(head), max(len(head), 10)
    return f"{n + 1:0{width}}.{random.getrandbits(32):08x}"
