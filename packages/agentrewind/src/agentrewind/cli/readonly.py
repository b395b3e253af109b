"""Stores opened for reading only: the CLI's read commands create and mark nothing."""

from __future__ import annotations

from typing import Any

from ..errors import SchemaVersionError
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
    from ..stores import _redis_keys as K
    from ..stores._redis_migrate import holds_layout_1
    from ..stores.redis import RedisStore

    class ReadOnlyRedisStore(RedisStore):
        """A `RedisStore` whose connect checks versions but sets no marker."""

        def _check_schema(self) -> None:
            raw = self.client.get(K.SCHEMA_KEY.format(prefix=self.prefix))
            if raw is not None and int(raw) > K.REDIS_SCHEMA_VERSION:
                raise SchemaVersionError(
                    f"Redis at {self.url} (prefix {self.prefix!r}) has schema version "
                    f"{int(raw)}; this agentrewind knows up to {K.REDIS_SCHEMA_VERSION}"
                )
            layout = self.client.get(K.namespace_key(self.prefix, self.namespace, "layout"))
            self.by_update = int(layout or 0) >= 3  # else list_runs reads and sorts them all
            self.read_only = True
            if holds_layout_1(self.client, self.prefix, self.namespace):
                raise SchemaVersionError(
                    f"Redis at {self.url}: namespace {self.namespace!r} holds runs stored with "
                    "key layout 1: connect once with ?migrate=1 to move the keys"
                )

    return ReadOnlyRedisStore
