"""Stores: where runs and steps live. Open one with `agentrewind.connect(url)`."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from .base import LeaseResult, PruneResult, Store
from .memory import MemoryStore
from .sqlite import SQLiteStore
from .urls import redact_url

__all__ = [
    "DEFAULT_URL",
    "LeaseResult",
    "MemoryStore",
    "PruneResult",
    "SQLiteStore",
    "Store",
    "connect",
]

DEFAULT_URL = "sqlite:///.agentrewind/agentrewind.db"
"""Store used when no URL is given and `$AGENTREWIND_STORE` is unset."""


def default_url() -> str:
    """Return `$AGENTREWIND_STORE`, else `DEFAULT_URL`."""
    return os.environ.get("AGENTREWIND_STORE") or DEFAULT_URL


def connect(url: str | None = None, *, namespace: str | None = None, **options: Any) -> Store:
    """Open a store from a URL.

    Args:
        url: `memory://[name]`, `sqlite:///relative.db`, `sqlite:////absolute.db`,
            `redis://[user:pw@]host:port/db`, `rediss://...` (TLS),
            `postgresql://user:pw@host:port/db` (or `postgres://`). A Redis server with cluster
            mode on is detected and used as a cluster. Query parameters: `namespace`; for SQLite
            `durability=full|normal` and `busy_timeout` (seconds); for Redis `prefix` and
            `cluster=1`; for PostgreSQL `schema`, `durability=full|normal`, `max_size`,
            `pipeline=0`, `prepare_threshold`, `lock_timeout` (seconds); other parameters go
            to libpq. Default: `$AGENTREWIND_STORE`, else `sqlite:///.agentrewind/agentrewind.db`.
        namespace: Overrides the URL's namespace (default `default`).
        **options: Backend keyword arguments (`durability`, `busy_timeout`, `socket_timeout`...).

    Returns:
        The open store. Close it with `close()` or use it as a context manager.

    Raises:
        ValueError: Unknown scheme.
        StoreUnavailableError: Redis or PostgreSQL cannot be reached.
        SchemaVersionError: The store was written by a newer agentrewind.
    """
    url = url or default_url()
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    query = dict(parse_qsl(parts.query))
    ns = namespace or query.get("namespace") or "default"
    if scheme == "memory":
        return MemoryStore(parts.netloc + parts.path, namespace=ns)
    if scheme == "sqlite":
        path = url.split("://", 1)[1].split("?", 1)[0]
        path = path[1:] if path.startswith("/") else path
        if not path:
            raise ValueError(f"no database path in {redact_url(url)!r}: use sqlite:///file.db")
        if "durability" in query:
            options.setdefault("durability", query["durability"])
        if "busy_timeout" in query:
            try:
                options.setdefault("busy_timeout", float(query["busy_timeout"]))
            except ValueError:
                raise ValueError(
                    f"busy_timeout in {redact_url(url)!r} must be a number of seconds, "
                    f"not {query['busy_timeout']!r}"
                ) from None
        return SQLiteStore(path, namespace=ns, **options)
    if scheme in ("redis", "rediss", "redis+cluster", "rediss+cluster"):
        from .redis import RedisStore

        if scheme.endswith("+cluster"):
            options.setdefault("cluster", True)
            url = url.replace("+cluster", "", 1)
        return RedisStore.from_url(url, namespace=ns, **options)
    if scheme in ("postgresql", "postgres"):
        from .postgres import PostgresStore

        return PostgresStore.from_url(url, namespace=ns, **options)
    raise ValueError(
        f"unknown store URL {redact_url(url)!r}: use memory://, sqlite:///path, redis://, "
        "rediss:// or postgresql://"
    )
