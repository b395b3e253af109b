"""SQL text of the SQLite backend of `RewindSaver`, kept in one place.

Tables carry the prefix `lg_` and live next to the core's `ar_` tables in the same file.
`ns` is the agentrewind store namespace; `cns` is LangGraph's `checkpoint_ns`.
"""

from __future__ import annotations

SCHEMA_VERSION = 3
"""Version of the `lg_` tables; a newer one is refused, an older one migrated forward."""


V1 = [
    # One row per checkpoint, without its channel values (those are in lg_blobs).
    """CREATE TABLE IF NOT EXISTS lg_checkpoints (
        ns TEXT NOT NULL, thread_id TEXT NOT NULL, cns TEXT NOT NULL, checkpoint_id TEXT NOT NULL,
        parent_id TEXT, run_id TEXT, cp_type TEXT NOT NULL, checkpoint BLOB NOT NULL,
        versions TEXT NOT NULL, metadata TEXT, md_type TEXT NOT NULL, md_blob BLOB,
        PRIMARY KEY (ns, thread_id, cns, checkpoint_id))""",
    "CREATE INDEX IF NOT EXISTS lg_checkpoints_run ON lg_checkpoints (ns, run_id) WHERE run_id IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS lg_checkpoints_id ON lg_checkpoints (ns, checkpoint_id)",
    # One row per (channel, version): kind 'f' full value, 'd' appended items after `base`,
    # 'e' a channel versioned without a value. `n` = items in the row for list values.
    """CREATE TABLE IF NOT EXISTS lg_blobs (
        ns TEXT NOT NULL, thread_id TEXT NOT NULL, cns TEXT NOT NULL, channel TEXT NOT NULL,
        version TEXT NOT NULL, kind TEXT NOT NULL, base TEXT, n INTEGER NOT NULL DEFAULT 0,
        type TEXT NOT NULL, value BLOB,
        PRIMARY KEY (ns, thread_id, cns, channel, version))""",
    """CREATE TABLE IF NOT EXISTS lg_writes (
        ns TEXT NOT NULL, thread_id TEXT NOT NULL, cns TEXT NOT NULL, checkpoint_id TEXT NOT NULL,
        task_id TEXT NOT NULL, idx INTEGER NOT NULL, task_path TEXT NOT NULL DEFAULT '',
        channel TEXT NOT NULL, type TEXT NOT NULL, value BLOB,
        PRIMARY KEY (ns, thread_id, cns, checkpoint_id, task_id, idx))""",
    """CREATE TABLE IF NOT EXISTS lg_threads (
        ns TEXT NOT NULL, thread_id TEXT NOT NULL, created_at REAL NOT NULL,
        updated_at REAL NOT NULL, ttl REAL, expires_at REAL,
        PRIMARY KEY (ns, thread_id)) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS lg_threads_updated ON lg_threads (ns, updated_at)",
    "CREATE INDEX IF NOT EXISTS lg_threads_expires ON lg_threads (expires_at) WHERE expires_at IS NOT NULL",
    # Deleted threads: a late write of the deleted history must not bring the thread back.
    """CREATE TABLE IF NOT EXISTS lg_tombstones (
        ns TEXT NOT NULL, thread_id TEXT NOT NULL, deleted_at REAL NOT NULL,
        PRIMARY KEY (ns, thread_id)) WITHOUT ROWID""",
]


def _rebuild(table: str, columns: str, key: str) -> list[str]:
    """Statements moving `table` to a WITHOUT ROWID table keyed by `key`, rows kept."""
    return [
        f"ALTER TABLE {table} RENAME TO {table}_v1",
        f"CREATE TABLE {table} ({columns}, PRIMARY KEY ({key})) WITHOUT ROWID",
        f"INSERT INTO {table} SELECT * FROM {table}_v1",
        f"DROP TABLE {table}_v1",
    ]


# V2: WITHOUT ROWID tables (one b-tree each instead of a table plus its key index: a commit
# writes fewer pages and the keys are stored once), no index on bare checkpoint ids, and run
# ids in a side table that a write touches only for a new (run, thread) pair.
V2 = [
    *_rebuild(
        "lg_checkpoints",
        """ns TEXT NOT NULL, thread_id TEXT NOT NULL, cns TEXT NOT NULL, checkpoint_id TEXT NOT NULL,
        parent_id TEXT, run_id TEXT, cp_type TEXT NOT NULL, checkpoint BLOB NOT NULL,
        versions BLOB NOT NULL, metadata TEXT, md_type TEXT NOT NULL, md_blob BLOB""",
        "ns, thread_id, cns, checkpoint_id",
    ),
    *_rebuild(
        "lg_blobs",
        """ns TEXT NOT NULL, thread_id TEXT NOT NULL, cns TEXT NOT NULL, channel TEXT NOT NULL,
        version TEXT NOT NULL, kind TEXT NOT NULL, base TEXT, n INTEGER NOT NULL DEFAULT 0,
        type TEXT NOT NULL, value BLOB""",
        # Version first: the values of one step share a version, so they land on one page.
        "ns, thread_id, cns, version, channel",
    ),
    *_rebuild(
        "lg_writes",
        """ns TEXT NOT NULL, thread_id TEXT NOT NULL, cns TEXT NOT NULL, checkpoint_id TEXT NOT NULL,
        task_id TEXT NOT NULL, idx INTEGER NOT NULL, task_path TEXT NOT NULL DEFAULT '',
        channel TEXT NOT NULL, type TEXT NOT NULL, value BLOB""",
        "ns, thread_id, cns, checkpoint_id, task_id, idx",
    ),
    "DELETE FROM lg_blobs WHERE kind = 'e'",  # an absent row means the same
    """CREATE TABLE IF NOT EXISTS lg_runs (
        ns TEXT NOT NULL, run_id TEXT NOT NULL, thread_id TEXT NOT NULL,
        PRIMARY KEY (ns, run_id, thread_id)) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS lg_runs_thread ON lg_runs (ns, thread_id)",
    """INSERT OR IGNORE INTO lg_runs SELECT DISTINCT ns, run_id, thread_id FROM lg_checkpoints
        WHERE run_id IS NOT NULL""",
]
# V3: the index on bare checkpoint ids again, so `list(None, limit=k)` (newest across threads)
# reads k index entries instead of sorting the namespace.
V3 = ["CREATE INDEX IF NOT EXISTS lg_checkpoints_id ON lg_checkpoints (ns, checkpoint_id)"]
MIGRATIONS: list[list[str]] = [V1, V2, V3]

# -- writes ------------------------------------------------------------------------------------
TOMBSTONE = "SELECT deleted_at FROM lg_tombstones WHERE ns = ? AND thread_id = ? AND deleted_at > ?"
ENSURE_THREAD = """INSERT OR IGNORE INTO lg_threads (ns, thread_id, created_at, updated_at)
    VALUES (?, ?, ?, ?)"""
ADD_RUN = "INSERT OR IGNORE INTO lg_runs (ns, run_id, thread_id) VALUES (?, ?, ?)"
CHECKPOINT_EXISTS = """SELECT 1 FROM lg_checkpoints
    WHERE ns = ? AND thread_id = ? AND cns = ? AND checkpoint_id = ?"""
BLOB_EXISTS = """SELECT 1 FROM lg_blobs
    WHERE ns = ? AND thread_id = ? AND cns = ? AND channel = ? AND version = ?"""
INSERT_CHECKPOINT = """INSERT OR REPLACE INTO lg_checkpoints (ns, thread_id, cns, checkpoint_id,
    parent_id, run_id, cp_type, checkpoint, versions, metadata, md_type, md_blob)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"""
_NOT_DELETED = """NOT EXISTS (SELECT 1 FROM lg_tombstones
    WHERE ns = ?1 AND thread_id = ?2 AND deleted_at > ?{since})"""
# The checkpoint, unless a live tombstone says the thread was deleted (then nothing: rowcount 0).
INSERT_LIVE_CHECKPOINT = f"""INSERT OR REPLACE INTO lg_checkpoints (ns, thread_id, cns,
    checkpoint_id, parent_id, run_id, cp_type, checkpoint, versions, metadata, md_type, md_blob)
    SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12
    WHERE {_NOT_DELETED.format(since=13)}"""
INSERT_BLOB = """INSERT OR REPLACE INTO lg_blobs (ns, thread_id, cns, channel, version, kind, base,
    n, type, value) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"""
INSERT_WRITE_KEEP = """INSERT OR IGNORE INTO lg_writes (ns, thread_id, cns, checkpoint_id, task_id,
    idx, task_path, channel, type, value) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"""
INSERT_WRITE_REPLACE = INSERT_WRITE_KEEP.replace("OR IGNORE", "OR REPLACE")
# A pending write, unless the thread was deleted and its checkpoint is gone (then nothing).
INSERT_LIVE_WRITE_KEEP = f"""INSERT OR IGNORE INTO lg_writes (ns, thread_id, cns, checkpoint_id,
    task_id, idx, task_path, channel, type, value)
    SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10
    WHERE {_NOT_DELETED.format(since=11)} OR EXISTS (SELECT 1 FROM lg_checkpoints
        WHERE ns = ?1 AND thread_id = ?2 AND cns = ?3 AND checkpoint_id = ?4)"""
INSERT_LIVE_WRITE_REPLACE = INSERT_LIVE_WRITE_KEEP.replace("OR IGNORE", "OR REPLACE", 1)
TOUCH_THREAD = """INSERT INTO lg_threads (ns, thread_id, created_at, updated_at, ttl, expires_at)
    VALUES (?1, ?2, ?3, ?3, ?4, CASE WHEN ?4 IS NULL THEN NULL ELSE ?3 + ?4 END)
    ON CONFLICT (ns, thread_id) DO UPDATE SET updated_at = ?3, ttl = coalesce(?4, ttl),
        expires_at = CASE WHEN coalesce(?4, ttl) IS NULL THEN NULL ELSE ?3 + coalesce(?4, ttl) END"""
CLEAR_TOMBSTONE = "DELETE FROM lg_tombstones WHERE ns = ? AND thread_id = ?"
SET_TOMBSTONE = """INSERT OR REPLACE INTO lg_tombstones (ns, thread_id, deleted_at)
    VALUES (?, ?, ?)"""
DELETE_THREAD = [
    "DELETE FROM lg_checkpoints WHERE ns = ? AND thread_id = ?",
    "DELETE FROM lg_blobs WHERE ns = ? AND thread_id = ?",
    "DELETE FROM lg_writes WHERE ns = ? AND thread_id = ?",
    "DELETE FROM lg_threads WHERE ns = ? AND thread_id = ?",
    "DELETE FROM lg_runs WHERE ns = ? AND thread_id = ?",
]
DELETE_CHECKPOINT = [
    "DELETE FROM lg_checkpoints WHERE ns = ? AND thread_id = ? AND cns = ? AND checkpoint_id = ?",
    "DELETE FROM lg_writes WHERE ns = ? AND thread_id = ? AND cns = ? AND checkpoint_id = ?",
]
DELETE_BLOB = """DELETE FROM lg_blobs
    WHERE ns = ? AND thread_id = ? AND cns = ? AND channel = ? AND version = ?"""
EXPIRED_THREADS = "SELECT ns, thread_id FROM lg_threads WHERE expires_at < ?"
PURGE_TOMBSTONES = "DELETE FROM lg_tombstones WHERE deleted_at < ?"

# -- reads -------------------------------------------------------------------------------------
CP_COLUMNS = """c.thread_id, c.cns, c.checkpoint_id, c.parent_id, c.cp_type, c.checkpoint,
    c.versions, c.metadata, c.md_type, c.md_blob"""
LIVE = """NOT EXISTS (SELECT 1 FROM lg_threads t WHERE t.ns = c.ns AND t.thread_id = c.thread_id
    AND t.expires_at < ?)"""
SELECT_CHECKPOINTS = f"SELECT {CP_COLUMNS} FROM lg_checkpoints c WHERE c.ns = ? AND {LIVE}"
# The latest (or the named, ?4) checkpoint of one thread and namespace, then its pending writes
# (in key order: the caller sorts them), in one statement: (0, id, parent, cp_type, checkpoint,
# versions, metadata, md_type, md_blob), then (1, task_path, task_id, idx, channel, type, value).
_ONE = """WITH c AS (SELECT checkpoint_id, parent_id, cp_type, checkpoint, versions, metadata,
        md_type, md_blob FROM lg_checkpoints
    WHERE ns = ?1 AND thread_id = ?2 AND cns = ?3 {named}
        AND NOT EXISTS (SELECT 1 FROM lg_threads t WHERE t.ns = ?1 AND t.thread_id = ?2
            AND t.expires_at < ?5)
    ORDER BY checkpoint_id DESC LIMIT 1)
SELECT 0, checkpoint_id, parent_id, cp_type, checkpoint, versions, metadata, md_type, md_blob
FROM c
UNION ALL
SELECT 1, w.task_path, w.task_id, w.idx, w.channel, w.type, w.value, NULL, NULL
FROM lg_writes w WHERE w.ns = ?1 AND w.thread_id = ?2 AND w.cns = ?3
    AND w.checkpoint_id = (SELECT checkpoint_id FROM c)"""
LATEST_ONE = _ONE.format(named="AND ?4 IS NULL")
NAMED_ONE = _ONE.format(named="AND checkpoint_id = ?4")
THREAD_CHECKPOINTS = """SELECT cns, checkpoint_id, parent_id, versions, run_id
    FROM lg_checkpoints WHERE ns = ? AND thread_id = ?"""
THREAD_BLOB_KEYS = (
    "SELECT cns, channel, version, kind, base FROM lg_blobs WHERE ns = ? AND thread_id = ?"
)
RUN_THREADS = "SELECT thread_id FROM lg_runs WHERE ns = ? AND run_id = ?"

# The rows of (channel, version) pairs, one index lookup each.
BLOB_ROWS = """SELECT b.channel, b.version, b.kind, b.base, b.n, b.type, b.value
    FROM (VALUES {values}) w JOIN lg_blobs b ON b.ns = ? AND b.thread_id = ? AND b.cns = ?
        AND b.channel = w.column1 AND b.version = w.column2"""
# Follows delta rows to their full base: (want_channel, want_version, depth, kind, n, type, value).
BLOB_CHAIN = """WITH RECURSIVE want(channel, version) AS (VALUES {values}),
chain(wc, wv, depth, kind, base, n, type, value) AS (
    SELECT b.channel, b.version, 0, b.kind, b.base, b.n, b.type, b.value
    FROM want w JOIN lg_blobs b ON b.ns = ? AND b.thread_id = ? AND b.cns = ?
        AND b.channel = w.channel AND b.version = w.version
    UNION ALL
    SELECT c.wc, c.wv, c.depth + 1, b.kind, b.base, b.n, b.type, b.value
    FROM chain c JOIN lg_blobs b ON b.ns = ? AND b.thread_id = ? AND b.cns = ?
        AND b.channel = c.wc AND b.version = c.base
    WHERE c.kind = 'd')
SELECT wc, wv, depth, kind, n, type, value FROM chain"""
WRITES_FOR = """SELECT checkpoint_id, task_id, channel, type, value, task_path, idx FROM lg_writes
    WHERE ns = ? AND thread_id = ? AND cns = ? AND checkpoint_id IN ({marks})
    ORDER BY checkpoint_id, task_path, task_id, idx"""
PARENT_CHAIN = """WITH RECURSIVE chain(checkpoint_id, parent_id, versions, depth) AS (
    SELECT checkpoint_id, parent_id, versions, 0 FROM lg_checkpoints
    WHERE ns = ?1 AND thread_id = ?2 AND cns = ?3 AND checkpoint_id = ?4
    UNION ALL
    SELECT c.checkpoint_id, c.parent_id, c.versions, chain.depth + 1
    FROM chain JOIN lg_checkpoints c ON c.ns = ?1 AND c.thread_id = ?2 AND c.cns = ?3
        AND c.checkpoint_id = chain.parent_id)
SELECT checkpoint_id, parent_id, versions FROM chain ORDER BY depth"""
BLOB_KINDS = """SELECT channel, version, kind FROM lg_blobs
    WHERE ns = ? AND thread_id = ? AND cns = ? AND channel IN ({marks})"""
LIST_THREADS = """SELECT thread_id, created_at, updated_at, expires_at FROM lg_threads
    WHERE ns = ? AND (expires_at IS NULL OR expires_at >= ?) ORDER BY updated_at DESC LIMIT ?"""
COPY_THREAD = [
    """INSERT OR REPLACE INTO lg_checkpoints SELECT ns, ?3, cns, checkpoint_id, parent_id, run_id,
        cp_type, checkpoint, versions, metadata, md_type, md_blob
        FROM lg_checkpoints WHERE ns = ?1 AND thread_id = ?2""",
    """INSERT OR REPLACE INTO lg_blobs SELECT ns, ?3, cns, channel, version, kind, base, n, type,
        value FROM lg_blobs WHERE ns = ?1 AND thread_id = ?2""",
    """INSERT OR REPLACE INTO lg_writes SELECT ns, ?3, cns, checkpoint_id, task_id, idx,
        task_path, channel, type, value FROM lg_writes WHERE ns = ?1 AND thread_id = ?2""",
    """INSERT OR IGNORE INTO lg_runs SELECT DISTINCT ns, run_id, ?3 FROM lg_checkpoints
        WHERE ns = ?1 AND thread_id = ?3 AND run_id IS NOT NULL""",
]
