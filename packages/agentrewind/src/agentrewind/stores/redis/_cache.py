"""The cross-run cache in Redis: native `PX` expiry, one hash tag per call site.

A site's keys are `PREFIX:NS:cache:{TAG}:SITE:part` (built by `_keys.id_base`, so distinct
(namespace, site) pairs never collide and a site lives in one Cluster slot): `e:KEY` (the
entry, a string with `PX` expiry), `lru` (sorted set: key by last use), `meta` (hash: key ->
"size duration tokens", and `!capped` at a site stored with `max_entries`) and `stats` (hash:
hits, misses, seconds, tokens, written in batches by a `Tally`). Each operation is one
script. The namespace's `cache_sites` set (another slot) lists the sites for `stats`.
"""

from __future__ import annotations

import time
from typing import Any

from ..cache import CacheEntry, CacheStats, TalliedCache
from . import _keys as K

__all__ = ["RedisCache"]

# A hit refreshes the LRU time only at a site stored with `max_entries` (`meta` field
# `!capped`, never an entry key); the counters are written in batches (`Tally`, COUNT).
GET = """
local v = redis.call('GET', KEYS[1])
if not v then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
  return false
end
local m = redis.call('HMGET', KEYS[3], ARGV[1], '!capped')
if m[2] then redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1]) end
local size, d, t = string.match(m[1] or '0 0 0', '(%S+) (%S+) (%S+)')
return {v, d, t}
"""
COUNT = """
redis.call('HINCRBY', KEYS[1], 'hits', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'misses', ARGV[2])
redis.call('HINCRBYFLOAT', KEYS[1], 'seconds', ARGV[3])
redis.call('HINCRBY', KEYS[1], 'tokens', ARGV[4])
"""
PUT = """
if tonumber(ARGV[3]) > 0 then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
else
  redis.call('SET', KEYS[1], ARGV[2])
end
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[5])
local max = tonumber(ARGV[6])
if max > 0 then
  redis.call('HSET', KEYS[3], '!capped', 1)
  local over = redis.call('ZCARD', KEYS[2]) - max
  if over > 0 then
    local old = redis.call('ZPOPMIN', KEYS[2], over)
    for i = 1, #old, 2 do
      redis.call('DEL', ARGV[7] .. old[i])
      redis.call('HDEL', KEYS[3], old[i])
    end
  end
end
"""
STATS = """
local n, bytes = 0, 0
for _, k in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if redis.call('EXISTS', ARGV[1] .. k) == 1 then
    n = n + 1
    local m = redis.call('HGET', KEYS[2], k)
    if m then bytes = bytes + tonumber(string.match(m, '^(%S+)')) end
  else
    redis.call('ZREM', KEYS[1], k)
    redis.call('HDEL', KEYS[2], k)
  end
end
local s = redis.call('HMGET', KEYS[3], 'hits', 'misses', 'seconds', 'tokens')
return {n, bytes, s[1] or '0', s[2] or '0', s[3] or '0', s[4] or '0'}
"""
CLEAR = """
local n = 0
for _, k in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  n = n + redis.call('DEL', ARGV[1] .. k)
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return n
"""


class RedisCache(TalliedCache):
    """The cache of a `RedisStore` namespace (Redis, Valkey, Redis Cluster)."""

    def __init__(self, store: Any) -> None:  # a RedisStore (which imports this module)
        super().__init__(store)
        self.redis: Any = store
        client = store.client
        self._stats, self._clear = (client.register_script(src) for src in (STATS, CLEAR))
        # Lookups and stores are the hot path: the store's own EVALSHA (`run_script`, on an
        # idle pinned connection), not redis-py's `Script` wrapper (25 µs more per call).
        store.register_scripts({"CACHE_GET": GET, "CACHE_PUT": PUT, "CACHE_COUNT": COUNT})
        self._sites = K.namespace_key(store.prefix, store.namespace, "cache_sites")

    def _base(self, site: str) -> str:
        return K.id_base(self.redis.prefix, self.redis.namespace, "cache", site)

    def get(self, site: str, key: str) -> CacheEntry | None:
        b = self._base(site)
        keys = [f"{b}:e:{key}", f"{b}:lru", f"{b}:meta"]
        reply = self.redis.run_script("CACHE_GET", keys, [key, time.time()])
        if reply is None:
            self._counted(site, False)
            return None
        entry = CacheEntry(bytes(reply[0]), float(reply[1]), int(float(reply[2])))
        self._counted(site, True, entry.duration, entry.tokens)
        return entry

    def _write_counts(self, counts: dict[str, list[Any]]) -> None:
        for site, (hits, misses, seconds, tokens) in sorted(counts.items()):
            stats = f"{self._base(site)}:stats"
            self.redis.run_script("CACHE_COUNT", [stats], [hits, misses, repr(seconds), tokens])
            self.redis._call(lambda s=site: self.redis.client.sadd(self._sites, s))

    def put(
        self,
        site: str,
        key: str,
        entry: CacheEntry,
        *,
        ttl: float | None,
        max_entries: int | None = None,
    ) -> None:
        b = self._base(site)
        keys = [f"{b}:e:{key}", f"{b}:lru", f"{b}:meta"]
        ttl_ms = 0 if ttl is None else max(1, round(ttl * 1000))
        meta = f"{len(entry.value)} {entry.duration!r} {int(entry.tokens)}"
        args = [key, entry.value, ttl_ms, time.time(), meta, max_entries or 0, f"{b}:e:"]

        self.redis.run_script("CACHE_PUT", keys, args)
        self.redis._call(lambda: self.redis.client.sadd(self._sites, site))

    def _site_keys(self, site: str) -> tuple[list[str], list[str]]:
        b = self._base(site)
        return [f"{b}:lru", f"{b}:meta", f"{b}:stats"], [f"{b}:e:"]

    def _all_sites(self) -> list[str]:
        raw = self.redis._call(lambda: self.redis.client.smembers(self._sites))
        return sorted(s.decode() if isinstance(s, bytes) else str(s) for s in raw)

    def clear(self, site: str | None = None) -> int:
        self.flush()  # counts of lookups before the clear go with it
        gone = 0
        for s in self._all_sites() if site is None else [site]:
            keys, args = self._site_keys(s)
            gone += int(self.redis._call(lambda k=keys, a=args: self._clear(keys=k, args=a)))
            self.redis._call(lambda s=s: self.redis.client.srem(self._sites, s))
        return gone

    def stats(self) -> list[CacheStats]:
        self.flush()
        out = []
        for s in self._all_sites():
            keys, args = self._site_keys(s)
            r = self.redis._call(lambda k=keys, a=args: self._stats(keys=k, args=a))
            n, size, hits, misses, seconds, tokens = r
            out.append(
                CacheStats(
                    s, int(n), int(size), int(hits), int(misses), float(seconds), int(tokens)
                )
            )
        return out
