"""Durable queues in SQLite: a table of entries, one of recent starts.

One short `BEGIN IMMEDIATE` transaction per dequeue, so every process on the file sees one
order.
Waiting entries are served from a partial index in dequeue order (priority, then
sequence), so taking one costs the same at any depth; in-flight entries have their own
partial index by expiry. Like the cache's, the tables have their own version
(`ar_queue_version`) and are created on first use.
"""

from __future__ import annotations

import time
from typing import Any

from ...errors import QueueDeduplicatedError, QueueError, SchemaVersionError
from ...records import RunMetrics, StepRecord
from .._once import Once
from ..queue import QueueBackend, QueueEntry, QueueLimits, QueueStats, pick, stats_of
from .db import apply_migrations

__all__ = ["SQLiteQueues"]

QUEUE_VERSION = 1
MIGRATIONS = [
    [
        """CREATE TABLE IF NOT EXISTS ar_queue (
            seq INTEGER PRIMARY KEY, ns TEXT NOT NULL, queue TEXT NOT NULL,
            run_id TEXT NOT NULL, priority INTEGER NOT NULL, part TEXT NOT NULL,
            dedup_id TEXT, not_before REAL NOT NULL, enqueued_at REAL NOT NULL,
            deliveries INTEGER NOT NULL DEFAULT 0, owner TEXT, expires_at REAL)""",
        "CREATE UNIQUE INDEX IF NOT EXISTS ar_queue_run ON ar_queue (ns, queue, run_id)",
        """CREATE INDEX IF NOT EXISTS ar_queue_waiting ON ar_queue (ns, queue, priority, seq)
            WHERE owner IS NULL""",
        """CREATE INDEX IF NOT EXISTS ar_queue_flight ON ar_queue (ns, queue, expires_at)
            WHERE owner IS NOT NULL""",
        """CREATE UNIQUE INDEX IF NOT EXISTS ar_queue_dedup ON ar_queue (ns, queue, dedup_id)
            WHERE dedup_id IS NOT NULL""",
        """CREATE TABLE IF NOT EXISTS ar_queue_starts (
            ns TEXT NOT NULL, queue TEXT NOT NULL, part TEXT NOT NULL, at REAL NOT NULL)""",
        "CREATE INDEX IF NOT EXISTS ar_queue_starts_at ON ar_queue_starts (ns, queue, at)",
    ]
]
COLUMNS = "queue, run_id, priority, part, dedup_id, not_before, enqueued_at, deliveries"
HOLDER = "SELECT run_id FROM ar_queue WHERE ns = ? AND queue = ? AND dedup_id = ?"
HAS = "SELECT 1 FROM ar_queue WHERE ns = ? AND queue = ? AND run_id = ?"
PUSH = f"""INSERT INTO ar_queue (ns, {COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0)"""
LAPSE = """UPDATE ar_queue SET owner = NULL, expires_at = NULL
    WHERE ns = ? AND queue = ? AND owner IS NOT NULL AND expires_at < ?"""
IN_FLIGHT = """SELECT part, count(*) FROM ar_queue
    WHERE ns = ? AND queue = ? AND owner IS NOT NULL GROUP BY part"""
FORGET_STARTS = "DELETE FROM ar_queue_starts WHERE ns = ? AND queue = ? AND at <= ?"
STARTS = "SELECT part, count(*) FROM ar_queue_starts WHERE ns = ? AND queue = ? GROUP BY part"
WAITING = f"""SELECT seq, {COLUMNS} FROM ar_queue
    WHERE ns = ? AND queue = ? AND owner IS NULL AND not_before <= ?
    ORDER BY priority, seq"""
TAKE = """UPDATE ar_queue SET owner = ?, expires_at = ?, deliveries = deliveries + 1
    WHERE seq = ?"""
START = "INSERT INTO ar_queue_starts (ns, queue, part, at) VALUES (?, ?, ?, ?)"
RENEW = """UPDATE ar_queue SET expires_at = ?
    WHERE ns = ? AND queue = ? AND run_id = ? AND owner = ? RETURNING run_id"""
RELEASE = """UPDATE ar_queue SET owner = NULL, expires_at = NULL
    WHERE ns = ? AND queue = ? AND run_id = ? AND owner = ?"""
FINISH = "DELETE FROM ar_queue WHERE ns = ? AND queue = ? AND run_id = ?"
ENTRY = f"SELECT seq, {COLUMNS} FROM ar_queue WHERE ns = ? AND queue = ? AND run_id = ?"
HAS_TABLES = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ar_queue'"
STATS = """SELECT queue, owner IS NOT NULL AND expires_at >= ?2, not_before > ?2,
    count(*), min(enqueued_at) FROM ar_queue WHERE ns = ?1 GROUP BY 1, 2, 3"""


def _entry(row: Any) -> QueueEntry:
    _seq, queue, run_id, priority, part, dedup_id, not_before, enqueued_at, deliveries = row
    return QueueEntry(queue, run_id, priority, part, dedup_id, not_before, enqueued_at, deliveries)


class SQLiteQueues(QueueBackend):
    """The queues of a `SQLiteStore` namespace."""

    def __init__(self, store: Any) -> None:  # a SQLiteStore (which imports this module)
        super().__init__(store)
        self.db = store.db
        self.ns = store.namespace
        self._tables = Once(self._create_tables)

    def _create_tables(self) -> None:
        def too_new(current: int) -> SchemaVersionError:
            return SchemaVersionError(
                f"{self.db.path} has queue schema version {current}; this agentrewind "
                f"knows up to {QUEUE_VERSION}: upgrade agentrewind"
            )

        with self.db.write() as conn:
            apply_migrations(conn, "ar_queue_version", MIGRATIONS, QUEUE_VERSION, too_new)

    def push(self, entry: QueueEntry) -> None:
        self._tables()
        e = entry
        with self.db.write() as conn:
            if e.dedup_id is not None:
                held = conn.execute(HOLDER, (self.ns, e.queue, e.dedup_id)).fetchone()
                if held is not None:
                    raise QueueDeduplicatedError(e.queue, e.dedup_id, held[0])
            if conn.execute(HAS, (self.ns, e.queue, e.run_id)).fetchone() is not None:
                raise QueueError(f"run {e.run_id!r} is already in queue {e.queue!r}")
            row = (e.priority, e.partition, e.dedup_id, e.not_before, time.time())
            conn.execute(PUSH, (self.ns, e.queue, e.run_id, *row))

    def enqueue(self, record: StepRecord, entry: QueueEntry) -> None:
        self._tables()
        store: Any = self.store
        with self.db.write():  # the store's writes join this one transaction
            store.begin_run(record.run_id)
            store.put_steps([record])
            store.end_run(record.run_id, "queued", RunMetrics())
            self.push(entry)

    def take(
        self, queue: str, limits: QueueLimits, owner: str, n: int, ttl: float
    ) -> list[QueueEntry]:
        self._tables()
        with self.db.write() as conn:
            now = time.time()
            conn.execute(LAPSE, (self.ns, queue, now))
            in_flight: dict[str, int] = {}
            if limits.concurrency is not None:
                in_flight = dict(conn.execute(IN_FLIGHT, (self.ns, queue)).fetchall())
            starts: dict[str, int] = {}
            if limits.limiter is not None:
                conn.execute(FORGET_STARTS, (self.ns, queue, now - limits.window))
                starts = dict(conn.execute(STARTS, (self.ns, queue)).fetchall())
            waiting = conn.execute(WAITING, (self.ns, queue, now))
            taken = pick(waiting, lambda r: r[4], limits, n, in_flight, starts)
            waiting.close()  # read only as far as the dequeue took
            conn.executemany(TAKE, [(owner, now + ttl, r[0]) for r in taken])
            if limits.limiter is not None:
                conn.executemany(START, [(self.ns, queue, r[4], now) for r in taken])
        return [_entry((*r[:-1], r[-1] + 1)) for r in taken]

    def renew(self, queue: str, owner: str, run_ids: list[str], ttl: float) -> list[str]:
        self._tables()
        held = []
        with self.db.write(durable=False) as conn:
            expires = time.time() + ttl
            for run_id in run_ids:
                if conn.execute(RENEW, (expires, self.ns, queue, run_id, owner)).fetchone():
                    held.append(run_id)
        return held

    def release(self, queue: str, owner: str, run_ids: list[str]) -> None:
        self._tables()
        with self.db.write() as conn:
            conn.executemany(RELEASE, [(self.ns, queue, r, owner) for r in run_ids])

    def finish(self, queue: str, run_id: str) -> bool:
        self._tables()
        with self.db.write() as conn:
            gone: int = conn.execute(FINISH, (self.ns, queue, run_id)).rowcount
        return gone > 0

    def entry(self, queue: str, run_id: str) -> QueueEntry | None:
        with self.db.read() as conn:
            if conn.execute(HAS_TABLES).fetchone() is None:
                return None
            row = conn.execute(ENTRY, (self.ns, queue, run_id)).fetchone()
        return None if row is None else _entry(row)

    def stats(self, queue: str | None = None) -> list[QueueStats]:
        with self.db.read() as conn:
            rows = (
                []
                if conn.execute(HAS_TABLES).fetchone() is None
                else conn.execute(STATS, (self.ns, time.time())).fetchall()
            )
        return stats_of(rows, queue)
