"""The cross-run cache in SQLite: one table of entries (expiry swept), one of counters.

The tables have their own version (`ar_cache_version`, through `apply_migrations`) and are
created on first use, so a store that never caches never gains them and the runs' schema
version is untouched.
"""

from __future__ import annotations

import time
from typing import Any

from ...errors import SchemaVersionError
from ..cache import CacheEntry, CacheStats, TableCache
from .db import apply_migrations

__all__ = ["SQLiteCache"]

CACHE_VERSION = 2
MIGRATIONS = [
    [
        """CREATE TABLE IF NOT EXISTS ar_cache (
            ns TEXT NOT NULL, site TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL,
            expires_at REAL, used_at REAL NOT NULL,
            duration REAL NOT NULL DEFAULT 0, tokens INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (ns, site, key))""",
        "CREATE INDEX IF NOT EXISTS ar_cache_used ON ar_cache (ns, site, used_at)",
        """CREATE INDEX IF NOT EXISTS ar_cache_expires ON ar_cache (ns, expires_at)
            WHERE expires_at IS NOT NULL""",
        """CREATE TABLE IF NOT EXISTS ar_cache_stats (
            ns TEXT NOT NULL, site TEXT NOT NULL, hits INTEGER NOT NULL DEFAULT 0,
            misses INTEGER NOT NULL DEFAULT 0, seconds_saved REAL NOT NULL DEFAULT 0,
            tokens_saved INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (ns, site)) WITHOUT ROWID""",
    ],
    # 2: `capped` marks a site stored with `max_entries`: only its hits refresh `used_at`.
    ["ALTER TABLE ar_cache_stats ADD COLUMN capped INTEGER NOT NULL DEFAULT 0"],
]
# A hit refreshes the entry's LRU time only where LRU is used: at a site stored with
# `max_entries` (`capped`). Elsewhere the UPDATE would rewrite the entry's row (value and all)
# and move its `ar_cache_used` index entry on every hit, random pages a large site does not
# keep in the page cache: what made a hit at 100,000 entries cost 1.5x one at 1,000.
GET = """SELECT c.value, c.duration, c.tokens, s.capped FROM ar_cache AS c
    LEFT JOIN ar_cache_stats AS s ON s.ns = c.ns AND s.site = c.site
    WHERE c.ns = ?1 AND c.site = ?2 AND c.key = ?3
    AND (c.expires_at IS NULL OR c.expires_at >= ?4)"""
TOUCH = "UPDATE ar_cache SET used_at = ?4 WHERE ns = ?1 AND site = ?2 AND key = ?3"
COUNT = """INSERT INTO ar_cache_stats (ns, site, hits, misses, seconds_saved, tokens_saved)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (ns, site) DO UPDATE SET
    hits = hits + ?3, misses = misses + ?4,
    seconds_saved = seconds_saved + ?5, tokens_saved = tokens_saved + ?6"""
PUT = """INSERT INTO ar_cache (ns, site, key, value, expires_at, used_at, duration, tokens)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (ns, site, key) DO UPDATE SET
    value = excluded.value, expires_at = excluded.expires_at, used_at = excluded.used_at,
    duration = excluded.duration, tokens = excluded.tokens"""
CAP = """INSERT INTO ar_cache_stats (ns, site, capped) VALUES (?, ?, 1)
    ON CONFLICT (ns, site) DO UPDATE SET capped = 1 WHERE capped = 0"""
SWEEP = "DELETE FROM ar_cache WHERE ns = ? AND expires_at < ?"
EVICT = """DELETE FROM ar_cache WHERE ns = ?1 AND site = ?2 AND key IN (
    SELECT key FROM ar_cache WHERE ns = ?1 AND site = ?2
    ORDER BY used_at DESC LIMIT -1 OFFSET ?3)"""
SITE_SIZES = """SELECT site, count(*), sum(length(value)) FROM ar_cache
    WHERE ns = ? AND (expires_at IS NULL OR expires_at >= ?) GROUP BY site"""
HAS_TABLES = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ar_cache_stats'"
COUNTERS = "SELECT site, hits, misses, seconds_saved, tokens_saved FROM ar_cache_stats WHERE ns = ?"


class SQLiteCache(TableCache):
    """The cache of a `SQLiteStore` namespace."""

    def __init__(self, store: Any) -> None:  # a SQLiteStore (which imports this module)
        super().__init__(store)
        self.db = store.db
        self.ns = store.namespace

    def _create_tables(self) -> None:
        def too_new(current: int) -> SchemaVersionError:
            return SchemaVersionError(
                f"{self.db.path} has cache schema version {current}; this agentrewind "
                f"knows up to {CACHE_VERSION}: upgrade agentrewind"
            )

        with self.db.write() as conn:
            apply_migrations(conn, "ar_cache_version", MIGRATIONS, CACHE_VERSION, too_new)

    def get(self, site: str, key: str) -> CacheEntry | None:
        # A read: the counters are written in batches (`Tally`), the LRU time only where
        # the site is capped (`max_entries`).
        self._tables()
        now = time.time()
        with self.db.read() as conn:
            row = conn.execute(GET, (self.ns, site, key, now)).fetchone()
        if row is None:
            self._counted(site, False)
            return None
        if row[3]:
            with self.db.write(durable=False) as conn:
                conn.execute(TOUCH, (self.ns, site, key, now))
        self._counted(site, True, float(row[1]), int(row[2]))
        return CacheEntry(bytes(row[0]), float(row[1]), int(row[2]))

    def _write_counts(self, counts: dict[str, list[Any]]) -> None:
        rows = [(self.ns, site, *c) for site, c in counts.items()]
        with self.db.write(durable=False) as conn:
            conn.executemany(COUNT, rows)

    def put(
        self,
        site: str,
        key: str,
        entry: CacheEntry,
        *,
        ttl: float | None,
        max_entries: int | None = None,
    ) -> None:
        self._tables()
        now = time.time()
        expires = None if ttl is None else now + ttl
        row = (self.ns, site, key, entry.value, expires, now, entry.duration, entry.tokens)
        with self.db.write(durable=False) as conn:
            conn.execute(PUT, row)
            conn.execute(SWEEP, (self.ns, now))
            if max_entries is not None:
                conn.execute(CAP, (self.ns, site))
                conn.execute(EVICT, (self.ns, site, max_entries))

    def clear(self, site: str | None = None) -> int:
        self._tables()
        self.flush()  # counts of lookups before the clear go with it
        where, args = (
            ("ns = ?", (self.ns,)) if site is None else ("ns = ? AND site = ?", (self.ns, site))
        )
        with self.db.write() as conn:
            gone = conn.execute(f"DELETE FROM ar_cache WHERE {where}", args).rowcount
            conn.execute(f"DELETE FROM ar_cache_stats WHERE {where}", args)
        return int(gone)

    def stats(self) -> list[CacheStats]:
        self.flush()
        out: dict[str, CacheStats] = {}
        with self.db.read() as conn:  # read only: a store that never cached has no tables
            if conn.execute(HAS_TABLES).fetchone() is None:
                return []
            for site, entries, size in conn.execute(SITE_SIZES, (self.ns, time.time())):
                out[site] = CacheStats(site, int(entries), int(size or 0))
            for site, hits, misses, seconds, tokens in conn.execute(COUNTERS, (self.ns,)):
                s = out.setdefault(site, CacheStats(site))
                s.hits, s.misses, s.seconds_saved, s.tokens_saved = hits, misses, seconds, tokens
        return [out[s] for s in sorted(out)]
