"""`RewindCache`: LangChain's `BaseCache` on agentrewind's cross-run cache (any store).

For `set_llm_cache(RewindCache(url))` or `model.cache = RewindCache(url)`. Entries live in the
store's cache under the call site `llm:langchain` (see `agentrewind cache stats`), keyed like
the journal keys chat calls: the prompt with message ids taken out, and LangChain's
`llm_string` (model, parameters, bound tools). Generations are stored as data (the adapter's
allowlisted codec, no pickle) and load without importing or calling anything.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from langchain_core.caches import BaseCache
from langchain_core.outputs import Generation

from agentrewind.adapters import (
    CacheEntry,
    Place,
    Serializer,
    Store,
    cache_content_key,
    cache_place,
    connect,
)

from . import _codec  # noqa: F401  (registers the LangChain codec the serializer uses)

__all__ = ["RewindCache"]

SITE = "llm:langchain"


def _without_ids(tree: Any) -> Any:
    """A `dumpd` prompt without the ids of its messages (they differ on every call)."""
    if isinstance(tree, list):
        return [_without_ids(v) for v in tree]
    if isinstance(tree, dict):
        out = {k: _without_ids(v) for k, v in tree.items()}
        kwargs = out.get("kwargs")
        if isinstance(kwargs, dict):
            kwargs.pop("id", None)
        return out
    return tree


def _normalised(prompt: str) -> Any:
    try:
        return _without_ids(json.loads(prompt))
    except ValueError:
        return prompt  # a plain-text prompt (completion models)


class RewindCache(BaseCache):
    """LangChain's `BaseCache` kept in an agentrewind store: shared by processes, with a TTL.

    Args:
        store: A `Store` or a store URL (SQLite, Redis, Redis Cluster, PostgreSQL, memory).
        ttl: Seconds an entry lives (None: until evicted or cleared).
        max_entries: Entries kept; the least recently used beyond it are evicted.
        serializer: How generations are stored (default: data only, no pickle; pass one with
            `encryption=` or `redact=` to apply those to cached values).

    Example:
        >>> from langchain_core.globals import set_llm_cache
        >>> set_llm_cache(RewindCache("memory://", ttl=3600))  # doctest: +SKIP
    """

    def __init__(
        self,
        store: Store | str,
        *,
        ttl: float | None = None,
        max_entries: int | None = None,
        serializer: Serializer | None = None,
    ) -> None:
        self._owns_store = not isinstance(store, Store)
        self.store = store if isinstance(store, Store) else connect(store)
        self.ttl = ttl
        self.max_entries = max_entries
        self.serializer = serializer or Serializer()

    def _key(self, prompt: str, llm_string: str) -> str:
        key_input = {"prompt": _normalised(prompt), "llm": llm_string}
        return cache_content_key(self.serializer, "llm", "langchain", key_input)

    def _place(self, key: str) -> Place:
        """Where an entry is stored (what its ciphertext is bound to)."""
        return cache_place(self.store.namespace, SITE, key)

    def _load(self, entry: CacheEntry | None, key: str) -> list[Generation] | None:
        if entry is None:
            return None
        value = self.serializer.open(json.loads(entry.value), self._place(key))
        return list(value)

    def _entry(self, return_val: Sequence[Generation], started: float, key: str) -> CacheEntry:
        tree = self.serializer.store_tree(list(return_val), "output", self._place(key))
        tokens = 0
        for gen in return_val:
            usage = getattr(getattr(gen, "message", None), "usage_metadata", None) or {}
            tokens += int(usage.get("total_tokens", 0) or 0)
        duration = max(0.0, time.perf_counter() - started) if started else 0.0
        return CacheEntry(json.dumps(tree, separators=(",", ":")).encode(), duration, tokens)

    def _put_args(self) -> dict[str, Any]:
        return {"ttl": self.ttl, "max_entries": self.max_entries}

    def lookup(self, prompt: str, llm_string: str) -> list[Generation] | None:
        """The cached generations of this prompt and model, or None."""
        key = self._key(prompt, llm_string)
        return self._load(self.store.cache.get(SITE, key), key)

    def update(self, prompt: str, llm_string: str, return_val: Sequence[Generation]) -> None:
        """Cache `return_val` for this prompt and model."""
        key = self._key(prompt, llm_string)
        entry = self._entry(return_val, 0.0, key)
        self.store.cache.put(SITE, key, entry, **self._put_args())

    def clear(self, **kwargs: Any) -> None:
        """Drop every entry of this cache (the `llm:langchain` site)."""
        self.store.cache.clear(SITE)

    async def alookup(self, prompt: str, llm_string: str) -> list[Generation] | None:
        """Async twin of `lookup`."""
        key = self._key(prompt, llm_string)
        return self._load(await self.store.cache.aget(SITE, key), key)

    async def aupdate(self, prompt: str, llm_string: str, return_val: Sequence[Generation]) -> None:
        """Async twin of `update`."""
        key = self._key(prompt, llm_string)
        entry = self._entry(return_val, 0.0, key)
        await self.store.cache.aput(SITE, key, entry, **self._put_args())

    async def aclear(self, **kwargs: Any) -> None:
        """Async twin of `clear`."""
        await self.store.cache.aclear(SITE)

    def close(self) -> None:
        """Close the store if this cache opened it from a URL."""
        if self._owns_store:
            self.store.close()
