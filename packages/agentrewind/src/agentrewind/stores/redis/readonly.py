"""A Redis store opened for reading only: the CLI's read commands create and mark nothing."""

from __future__ import annotations

from ...errors import SchemaVersionError
from . import _keys as K
from ._migrate import holds_layout_1
from .store import RedisStore

__all__ = ["ReadOnlyRedisStore"]


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
