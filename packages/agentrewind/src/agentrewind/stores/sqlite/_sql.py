"""SQL text of the SQLite store, kept in one place."""

from __future__ import annotations

# Version 1. Each later version appends a list of statements to MIGRATIONS.
V1 = [
    """CREATE TABLE IF NOT EXISTS ar_runs (
        ns TEXT NOT NULL, run_id TEXT NOT NULL, status TEXT NOT NULL,
        created_at REAL NOT NULL, updated_at REAL NOT NULL,
        ttl REAL, expires_at REAL, metrics TEXT NOT NULL DEFAULT '{}',
        PRIMARY KEY (ns, run_id)) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS ar_runs_updated ON ar_runs (ns, updated_at)",
    "CREATE INDEX IF NOT EXISTS ar_runs_expires ON ar_runs (expires_at) WHERE expires_at IS NOT NULL",
    """CREATE TABLE IF NOT EXISTS ar_steps (
        ns TEXT NOT NULL, run_id TEXT NOT NULL, key TEXT NOT NULL, step_id TEXT NOT NULL,
        seq INTEGER NOT NULL, data BLOB NOT NULL,
        PRIMARY KEY (ns, run_id, key))""",
    "CREATE INDEX IF NOT EXISTS ar_steps_seq ON ar_steps (ns, run_id, seq)",
    "CREATE INDEX IF NOT EXISTS ar_steps_id ON ar_steps (ns, run_id, step_id)",
    """CREATE TABLE IF NOT EXISTS ar_heads (
        ns TEXT NOT NULL, run_id TEXT NOT NULL, branch TEXT NOT NULL, step_id TEXT NOT NULL,
        PRIMARY KEY (ns, run_id, branch)) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS ar_leases (
        ns TEXT NOT NULL, run_id TEXT NOT NULL, owner TEXT NOT NULL, expires_at REAL NOT NULL,
        PRIMARY KEY (ns, run_id)) WITHOUT ROWID""",
]
MIGRATIONS: list[list[str]] = [V1]

UPSERT_RUN = """INSERT INTO ar_runs (ns, run_id, status, created_at, updated_at, ttl, expires_at)
    VALUES (?1, ?2, ?3, ?4, ?4, ?5, CASE WHEN ?5 IS NULL THEN NULL ELSE ?4 + ?5 END)
    ON CONFLICT (ns, run_id) DO UPDATE SET
        status = ?3, updated_at = ?4, ttl = coalesce(?5, ttl),
        expires_at = CASE WHEN coalesce(?5, ttl) IS NULL THEN NULL ELSE ?4 + coalesce(?5, ttl) END"""
COUNT_EXECUTION = """UPDATE ar_runs SET metrics = json_set(metrics, '$.executions',
    coalesce(json_extract(metrics, '$.executions'), 0) + 1) WHERE ns = ?1 AND run_id = ?2"""
TOUCH_RUN = """INSERT INTO ar_runs (ns, run_id, status, created_at, updated_at)
    VALUES (?1, ?2, 'running', ?3, ?3)
    ON CONFLICT (ns, run_id) DO UPDATE SET updated_at = ?3,
        expires_at = CASE WHEN ttl IS NULL THEN NULL ELSE ?3 + ttl END"""
SET_TTL = """UPDATE ar_runs SET ttl = ?3,
    expires_at = CASE WHEN ?3 IS NULL THEN NULL ELSE updated_at + ?3 END
    WHERE ns = ?1 AND run_id = ?2"""
END_RUN = (
    "UPDATE ar_runs SET status = ?3, metrics = ?4, updated_at = ?5 WHERE ns = ?1 AND run_id = ?2"
)
# With the lease's owner and expiry, so a `running` run whose owner died shows as `crashed`.
RUN_COLUMNS = """r.run_id, r.status, r.created_at, r.updated_at, r.expires_at, r.metrics,
    l.owner, l.expires_at"""
_RUNS_WITH_LEASE = "ar_runs r LEFT JOIN ar_leases l ON l.ns = r.ns AND l.run_id = r.run_id"
GET_RUN = f"""SELECT {RUN_COLUMNS} FROM {_RUNS_WITH_LEASE} WHERE r.ns = ? AND r.run_id = ?
    AND (r.expires_at IS NULL OR r.expires_at >= ?)"""
LIST_RUNS = f"""SELECT {RUN_COLUMNS} FROM {_RUNS_WITH_LEASE} WHERE r.ns = ?
    AND (r.expires_at IS NULL OR r.expires_at >= ?) ORDER BY r.updated_at DESC LIMIT ?"""
# The fence of a write by a lease owner: the lease, and whether the run (unexpired) exists.
FENCE = """SELECT l.owner, l.expires_at, EXISTS (SELECT 1 FROM ar_runs r
        WHERE r.ns = ?1 AND r.run_id = ?2 AND (r.expires_at IS NULL OR r.expires_at >= ?3))
    FROM (SELECT 1) LEFT JOIN ar_leases l ON l.ns = ?1 AND l.run_id = ?2"""
RUN_EXPIRED = "SELECT 1 FROM ar_runs WHERE ns = ? AND run_id = ? AND expires_at < ?"
# Before a journal write (?3 = now, ?4 = the touch interval): whether the run has expired, and
# whether its `updated_at` may stay as it is: written less than the interval ago (1% of its TTL
# if that is shorter) and still the newest of the namespace, so `list_runs` order is unchanged.
# No row: the run does not exist yet (the touch creates it).
RUN_STATE = """SELECT expires_at < ?3,
        ?3 - updated_at BETWEEN 0 AND min(?4, coalesce(ttl / 100.0, ?4))
        AND updated_at >= (SELECT updated_at FROM ar_runs WHERE ns = ?1
            ORDER BY updated_at DESC LIMIT 1)
    FROM ar_runs WHERE ns = ?1 AND run_id = ?2"""
EXPIRED_RUNS = "SELECT ns, run_id FROM ar_runs WHERE ns = ? AND expires_at < ?"
# Everything of a run but its lease (an expired run revived by a lease holder keeps the lease).
DELETE_EXPIRED_RUN = [
    "DELETE FROM ar_steps WHERE ns = ? AND run_id = ?",
    "DELETE FROM ar_heads WHERE ns = ? AND run_id = ?",
    "DELETE FROM ar_runs WHERE ns = ? AND run_id = ?",
]
# The run row goes last: `_delete_run_txn` reports its rowcount.
DELETE_RUN = ["DELETE FROM ar_leases WHERE ns = ? AND run_id = ?", *DELETE_EXPIRED_RUN]

# A new step, or new data for the same step (its `completed` after its `started`): an update of
# `data` alone leaves the indexes' pages alone. A row it skipped (same key, another step id or
# seq) is written by `UPSERT_STEP`.
PUT_STEP = """INSERT INTO ar_steps (ns, run_id, key, step_id, seq, data) VALUES (?, ?, ?, ?, ?, ?)
    ON CONFLICT (ns, run_id, key) DO UPDATE SET data = excluded.data
        WHERE step_id = excluded.step_id AND seq = excluded.seq"""
UPSERT_STEP = """INSERT INTO ar_steps (ns, run_id, key, step_id, seq, data) VALUES (?, ?, ?, ?, ?, ?)
    ON CONFLICT (ns, run_id, key) DO UPDATE SET
        step_id = excluded.step_id, seq = excluded.seq, data = excluded.data"""
LOAD_STEPS = "SELECT key, data FROM ar_steps WHERE ns = ? AND run_id = ? ORDER BY seq"
LOAD_INDEX = "SELECT key, data FROM ar_steps WHERE ns = ? AND run_id = ?"
LAST_STEP = (
    "SELECT seq, step_id FROM ar_steps WHERE ns = ? AND run_id = ? ORDER BY seq DESC LIMIT 1"
)
STEP_BY_KEY = "SELECT data FROM ar_steps WHERE ns = ? AND run_id = ? AND key = ?"
GET_STEP = "SELECT key, data FROM ar_steps WHERE ns = ? AND run_id = ? AND step_id = ?"

SET_HEAD = """INSERT INTO ar_heads (ns, run_id, branch, step_id) VALUES (?, ?, ?, ?)
    ON CONFLICT (ns, run_id, branch) DO UPDATE SET step_id = excluded.step_id"""
DELETE_HEAD = "DELETE FROM ar_heads WHERE ns = ? AND run_id = ? AND branch = ?"
GET_HEADS = "SELECT branch, step_id FROM ar_heads WHERE ns = ? AND run_id = ?"

GET_LEASE = "SELECT owner, expires_at FROM ar_leases WHERE ns = ? AND run_id = ?"
SET_LEASE = """INSERT INTO ar_leases (ns, run_id, owner, expires_at) VALUES (?, ?, ?, ?)
    ON CONFLICT (ns, run_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at"""
RELEASE_LEASE = "DELETE FROM ar_leases WHERE ns = ? AND run_id = ? AND owner = ?"
RENEW_LEASE = """UPDATE ar_leases SET expires_at = ?5
    WHERE ns = ?1 AND run_id = ?2 AND owner = ?3 AND expires_at > ?4"""
