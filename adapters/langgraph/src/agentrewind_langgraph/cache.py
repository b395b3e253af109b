"""`RewindCache`: LangGraph's node cache (`langgraph.cache.base.BaseCache`) on agentrewind.

For `builder.compile(cache=RewindCache(url))` with a node `CachePolicy(ttl=...)`: entries live
in the store's cross-run cache (SQLite, Redis, Redis Cluster, PostgreSQL, memory), one call
site per LangGraph cache namespace (`node:<namespace>`, listed by `agentrewind cache stats`),
with the store's native expiry. Values are encoded by `SafeSerializer` (LangGraph's strict
serde, no pickle): loading one revives only LangGraph's safe types, and an entry naming
anything else (`os.system`) raises `UnsafeCheckpointError` without importing or calling it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any

from langgraph.cache.base import BaseCache, FullKey, Namespace
from langgraph.checkpoint.serde.base import SerializerProtocol

from agentrewind.adapters import CacheEntry, SerializationError, Store, connect

from ._serde import SafeSerializer

__all__ = ["RewindCache"]


def _site(namespace: Namespace) -> str:
    return "node:" + "/".join(namespace)


class RewindCache(BaseCache[Any]):
    """LangGraph's node cache kept in an agentrewind store, shared by processes and threads.

    Args:
        store: A `Store` or a store URL.
        serde: How values are encoded (default: `SafeSerializer()`, data only, no pickle).
        max_entries: Entries kept per namespace; the least recently used beyond it go.
    """

    def __init__(
        self,
        store: Store | str,
        *,
        serde: SerializerProtocol | None = None,
        max_entries: int | None = None,
    ) -> None:
        super().__init__(serde=serde or SafeSerializer())
        self._owns_store = not isinstance(store, Store)
        self.store = store if isinstance(store, Store) else connect(store)
        self.max_entries = max_entries

    def _encode(self, value: Any) -> CacheEntry:
        kind, data = self.serde.dumps_typed(value)
        text = json.dumps({"t": kind, "b": base64.b64encode(data).decode()})
        return CacheEntry(text.encode())

    def _decode(self, entry: CacheEntry, key: FullKey) -> Any:
        try:
            doc = json.loads(entry.value)
            typed = (str(doc["t"]), base64.b64decode(doc["b"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise SerializationError(
                f"cache entry {key!r} of LangGraph namespace {key[0]!r} is unreadable: {exc}"
            ) from exc
        return self.serde.loads_typed(typed)

    def get(self, keys: Sequence[FullKey]) -> dict[FullKey, Any]:
        """The cached values of `keys` that are present and unexpired."""
        out: dict[FullKey, Any] = {}
        for full in keys:
            entry = self.store.cache.get(_site(full[0]), full[1])
            if entry is not None:
                out[full] = self._decode(entry, full)
        return out

    async def aget(self, keys: Sequence[FullKey]) -> dict[FullKey, Any]:
        """Async twin of `get`."""
        out: dict[FullKey, Any] = {}
        for full in keys:
            entry = await self.store.cache.aget(_site(full[0]), full[1])
            if entry is not None:
                out[full] = self._decode(entry, full)
        return out

    def set(self, pairs: Mapping[FullKey, tuple[Any, int | None]]) -> None:
        """Cache each value for its TTL in seconds (None: until evicted or cleared)."""
        for (ns, key), (value, ttl) in pairs.items():
            entry = self._encode(value)
            self.store.cache.put(_site(ns), key, entry, ttl=ttl, max_entries=self.max_entries)

    async def aset(self, pairs: Mapping[FullKey, tuple[Any, int | None]]) -> None:
        """Async twin of `set`."""
        for (ns, key), (value, ttl) in pairs.items():
            entry = self._encode(value)
            await self.store.cache.aput(
                _site(ns), key, entry, ttl=ttl, max_entries=self.max_entries
            )

    def clear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        """Drop the entries of `namespaces` (None: every site of the store's cache)."""
        if namespaces is None:
            self.store.cache.clear()
            return
        for ns in namespaces:
            self.store.cache.clear(_site(ns))

    async def aclear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        """Async twin of `clear`."""
        if namespaces is None:
            await self.store.cache.aclear()
            return
        for ns in namespaces:
            await self.store.cache.aclear(_site(ns))

    def close(self) -> None:
        """Close the store if this cache opened it from a URL."""
        if self._owns_store:
            self.store.close()
