"""The cross-run cache in PostgreSQL: a table of entries (expiry swept), one of counters.

The tables have their own version table (`ar_cache_version`, through the store's versioned
`migrate`) and are created on first use, so the runs' schema version is untouched. A lookup
is one statement (the entry's use time updated with it); the sites' counters are written in
batches (`Tally`).
"""

from __future__ import annotations

import time
from typing import Any

from ...errors import SchemaVersionError
from ..cache import CacheEntry, CacheStats, TableCache
from ._rls import enable_on
from ._sql import policy

__all__ = ["PostgresCache"]

CACHE_VERSION = 2
MIGRATIONS = [
    [
        """CREATE TABLE IF NOT EXISTS {s}.ar_cache (
            ns TEXT NOT NULL, site TEXT NOT NULL, key TEXT NOT NULL, value BYTEA NOT NULL,
            expires_at DOUBLE PRECISION, used_at DOUBLE PRECISION NOT NULL,
            duration DOUBLE PRECISION NOT NULL DEFAULT 0, tokens BIGINT NOT NULL DEFAULT 0,
            PRIMARY KEY (ns, site, key))""",
        "CREATE INDEX IF NOT EXISTS ar_cache_used ON {s}.ar_cache (ns, site, used_at)",
        """CREATE INDEX IF NOT EXISTS ar_cache_expires ON {s}.ar_cache (ns, expires_at)
            WHERE expires_at IS NOT NULL""",
        """CREATE TABLE IF NOT EXISTS {s}.ar_cache_stats (
            ns TEXT NOT NULL, site TEXT NOT NULL, hits BIGINT NOT NULL DEFAULT 0,
            misses BIGINT NOT NULL DEFAULT 0, seconds_saved DOUBLE PRECISION NOT NULL DEFAULT 0,
            tokens_saved BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (ns, site))""",
    ],
    # Row-level security per namespace (enabled with the store's: `_rls.enable_on`).
    [policy("ar_namespace", t) for t in ("ar_cache", "ar_cache_stats")],
]
GET = """UPDATE {s}.ar_cache SET used_at = %(now)s
    WHERE ns = %(ns)s AND site = %(site)s AND key = %(key)s
        AND (expires_at IS NULL OR expires_at >= %(now)s)
    RETURNING value, duration, tokens"""
COUNT = """INSERT INTO {s}.ar_cache_stats AS c (ns, site, hits, misses, seconds_saved,
        tokens_saved) VALUES (%s, %s, %s, %s, %s, %s)
    ON CONFLICT (ns, site) DO UPDATE SET hits = c.hits + excluded.hits,
        misses = c.misses + excluded.misses,
        seconds_saved = c.seconds_saved + excluded.seconds_saved,
        tokens_saved = c.tokens_saved + excluded.tokens_saved"""
PUT = """INSERT INTO {s}.ar_cache (ns, site, key, value, expires_at, used_at, duration, tokens)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (ns, site, key) DO UPDATE SET
    value = excluded.value, expires_at = excluded.expires_at, used_at = excluded.used_at,
    duration = excluded.duration, tokens = excluded.tokens"""
SWEEP = "DELETE FROM {s}.ar_cache WHERE ns = %s AND expires_at < %s"
EVICT = """DELETE FROM {s}.ar_cache WHERE ns = %(ns)s AND site = %(site)s AND key IN (
    SELECT key FROM {s}.ar_cache WHERE ns = %(ns)s AND site = %(site)s
    ORDER BY used_at DESC OFFSET %(keep)s)"""
SITE_SIZES = """SELECT site, count(*), sum(length(value)) FROM {s}.ar_cache
    WHERE ns = %s AND (expires_at IS NULL OR expires_at >= %s) GROUP BY site"""
COUNTERS = """SELECT site, hits, misses, seconds_saved, tokens_saved FROM {s}.ar_cache_stats
    WHERE ns = %s"""


class PostgresCache(TableCache):
    """The cache of a `PostgresStore` namespace."""

    def __init__(self, store: Any) -> None:  # a PostgresStore (which imports this module)
        super().__init__(store)
        self.pg = store
        self.db = store.db
        self.ns = store.namespace

    def _create_tables(self) -> None:
        def too_new(current: int) -> SchemaVersionError:
            return SchemaVersionError(
                f"PostgreSQL at {self.pg.url} (schema {self.pg.schema!r}) has cache schema "
                f"version {current}; this agentrewind knows up to {CACHE_VERSION}"
            )

        table = self.pg.render("{s}.ar_cache_version")
        migrations = [self.pg.render(m) for m in MIGRATIONS]
        self.db.migrate(table, migrations, CACHE_VERSION, too_new)
        enable_on(self.pg, ["ar_cache", "ar_cache_stats"])

    def _run(
        self, statements: list[tuple[str, Any]], fetch: int | None = None, *, write: bool = True
    ) -> list[Any]:
        """One transaction in one round trip; writes do not wait for the disk.

        A cache write lost in a crash costs one call again, never a wrong value.
        """
        rendered = [(self.pg.render(sql), params) for sql, params in statements]
        if not write:
            rows: list[Any] = self.db.fetchall(*rendered[0])
            return rows
        self._tables()
        rows = self.pg.write(rendered, fetch=fetch, durable=False)
        return rows

    def get(self, site: str, key: str) -> CacheEntry | None:
        params = {"ns": self.ns, "site": site, "key": key, "now": time.time()}
        rows = self._run([(GET, params)], fetch=0)
        if not rows:
            self._counted(site, False)
            return None
        value, duration, tokens = rows[0]
        self._counted(site, True, float(duration), int(tokens))
        return CacheEntry(bytes(value), float(duration), int(tokens))

    def _write_counts(self, counts: dict[str, list[Any]]) -> None:
        self._run([(COUNT, (self.ns, site, *c)) for site, c in sorted(counts.items())])

    def put(
        self,
        site: str,
        key: str,
        entry: CacheEntry,
        *,
        ttl: float | None,
        max_entries: int | None = None,
    ) -> None:
        now = time.time()
        expires = None if ttl is None else now + ttl
        row = (self.ns, site, key, entry.value, expires, now, entry.duration, entry.tokens)
        statements: list[tuple[str, Any]] = [(PUT, row), (SWEEP, (self.ns, now))]
        if max_entries is not None:
            statements.append((EVICT, {"ns": self.ns, "site": site, "keep": max_entries}))
        self._run(statements)

    def clear(self, site: str | None = None) -> int:
        self.flush()  # counts of lookups before the clear go with it
        where, args = (
            ("ns = %s", (self.ns,)) if site is None else ("ns = %s AND site = %s", (self.ns, site))
        )
        statements = [
            (f"DELETE FROM {{s}}.ar_cache WHERE {where} RETURNING 1", args),
            (f"DELETE FROM {{s}}.ar_cache_stats WHERE {where}", args),
        ]
        return len(self._run(statements, fetch=0))

    def stats(self) -> list[CacheStats]:
        self.flush()
        out: dict[str, CacheStats] = {}
        table = self.pg.render("{s}.ar_cache_version")
        if not self._tables.done and self.db.version(table) is None:
            return []  # never cached here (and a read-only store creates nothing)
        for site, entries, size in self._run(
            [(SITE_SIZES, (self.ns, time.time()))], fetch=0, write=False
        ):
            out[site] = CacheStats(site, int(entries), int(size or 0))
        for site, hits, misses, seconds, tokens in self._run(
            [(COUNTERS, (self.ns,))], fetch=0, write=False
        ):
            s = out.setdefault(site, CacheStats(site))
            s.hits, s.misses, s.seconds_saved = int(hits), int(misses), float(seconds)
            s.tokens_saved = int(tokens)
        return [out[s] for s in sorted(out)]
