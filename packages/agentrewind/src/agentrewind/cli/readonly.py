"""Stores opened for reading only: the CLI's read commands create and mark nothing."""

from __future__ import annotations

from typing import Any

from ..stores import Store, connect

__all__ = ["connect_read_only"]


def connect_read_only(url: str, namespace: str | None) -> Store:
    """Open `url` without writing anything.

    SQLite read-only (the file must exist); Redis without the schema and layout markers a
    writer sets on connect; PostgreSQL without creating or migrating its schema (it must
    exist) and refusing writes; other stores as usual.
    """
    scheme = url.split("://", 1)[0].lower()
    if scheme == "sqlite":
        return connect(url, namespace=namespace, read_only=True)
    if scheme.startswith(("redis", "rediss")):
        store: Store = _redis_class().from_url(
            url.replace("+cluster", "", 1),
            namespace=namespace or _query_namespace(url),
            **({"cluster": True} if "+cluster" in scheme else {}),
        )
        return store
    if scheme in ("postgresql", "postgres"):
        return connect(url, namespace=namespace, read_only=True)
    return connect(url, namespace=namespace)


def _query_namespace(url: str) -> str:
    from urllib.parse import parse_qsl, urlsplit

    return dict(parse_qsl(urlsplit(url).query)).get("namespace") or "default"


def _redis_class() -> Any:
    from ..stores.redis import ReadOnlyRedisStore

    return ReadOnlyRedisStore
