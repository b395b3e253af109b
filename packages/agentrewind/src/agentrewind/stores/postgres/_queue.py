"""Durable queues in PostgreSQL: a table of entries, one of recent starts.

A dequeue is one pipelined transaction (one round trip): a per-queue transaction lock when
the queue has limits (so the counts it reads are the counts it writes against, whoever
else dequeues), lapsed slots back to waiting, then one statement that reads the waiting
entries in dequeue order from a partial index with `FOR UPDATE SKIP LOCKED`, applies the
limits (the rule of `stores.queue.pick`, per partition with a window function) and marks
the chosen ones in flight. Times are the server's (`clock_timestamp()`), so workers on
machines with skewed clocks agree. The tables have their own version (`ar_queue_version`)
and are created on first use.
"""

from __future__ import annotations

from typing import Any

import psycopg

from ...errors import QueueDeduplicatedError, QueueError, SchemaVersionError, StoreError
from ...records import RunMetrics, StepRecord
from .._once import Once
from ..queue import QueueBackend, QueueEntry, QueueLimits, QueueStats, stats_of
from ._flow import PgFlow
from ._rls import enable_on
from ._sql import policy

__all__ = ["PostgresQueues"]

NOW = "extract(epoch FROM clock_timestamp())"
PARTITION_SCAN = 1000
"""Waiting entries a dequeue of a partitioned queue looks at (in order) for free partitions."""
QUEUE_VERSION = 2
MIGRATIONS = [
    [
        """CREATE TABLE IF NOT EXISTS {s}.ar_queue (
            seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, ns TEXT NOT NULL,
            queue TEXT NOT NULL, run_id TEXT NOT NULL, priority INTEGER NOT NULL,
            part TEXT NOT NULL, dedup_id TEXT, not_before DOUBLE PRECISION NOT NULL,
            enqueued_at DOUBLE PRECISION NOT NULL, deliveries INTEGER NOT NULL DEFAULT 0,
            owner TEXT, expires_at DOUBLE PRECISION)""",
        "CREATE UNIQUE INDEX IF NOT EXISTS ar_queue_run ON {s}.ar_queue (ns, queue, run_id)",
        """CREATE INDEX IF NOT EXISTS ar_queue_waiting ON {s}.ar_queue
            (ns, queue, priority, seq) WHERE owner IS NULL""",
        """CREATE INDEX IF NOT EXISTS ar_queue_flight ON {s}.ar_queue (ns, queue, expires_at)
            WHERE owner IS NOT NULL""",
        """CREATE UNIQUE INDEX IF NOT EXISTS ar_queue_dedup ON {s}.ar_queue
            (ns, queue, dedup_id) WHERE dedup_id IS NOT NULL""",
        """CREATE TABLE IF NOT EXISTS {s}.ar_queue_starts (ns TEXT NOT NULL,
            queue TEXT NOT NULL, part TEXT NOT NULL, at DOUBLE PRECISION NOT NULL)""",
        "CREATE INDEX IF NOT EXISTS ar_queue_starts_at ON {s}.ar_queue_starts (ns, queue, at)",
    ],
    # Row-level security per namespace (enabled with the store's: `_rls.enable_on`).
    [policy("ar_namespace", t) for t in ("ar_queue", "ar_queue_starts")],
]
COLUMNS = "queue, run_id, priority, part, dedup_id, not_before, enqueued_at, deliveries"
Q_COLUMNS = ", ".join(f"q.{c.strip()}" for c in COLUMNS.split(","))
PART = "CASE WHEN %(partitioned)s::boolean THEN part ELSE '' END"
PUSH = f"""INSERT INTO {{s}}.ar_queue (ns, {COLUMNS})
    VALUES (%s, %s, %s, %s, %s, %s, %s, {NOW}, 0) ON CONFLICT DO NOTHING RETURNING seq"""
PUSH_NEW = f"""INSERT INTO {{s}}.ar_queue (ns, {COLUMNS})
    VALUES (%s, %s, %s, %s, %s, %s, %s, {NOW}, 0)"""
HOLDERS = """SELECT run_id, dedup_id FROM {s}.ar_queue WHERE ns = %s AND queue = %s
    AND (run_id = %s OR dedup_id = %s)"""
LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"
LAPSE = f"""UPDATE {{s}}.ar_queue SET owner = NULL, expires_at = NULL
    WHERE ns = %s AND queue = %s AND owner IS NOT NULL AND expires_at < {NOW}"""
FORGET_STARTS = f"""DELETE FROM {{s}}.ar_queue_starts
    WHERE ns = %s AND queue = %s AND at <= {NOW} - %s"""
TAKE = f"""WITH flight AS (
        SELECT {PART} AS part, count(*) AS n FROM {{s}}.ar_queue
        WHERE ns = %(ns)s AND queue = %(queue)s AND owner IS NOT NULL AND %(counted)s
        GROUP BY 1),
    started AS (
        SELECT {PART} AS part, count(*) AS n FROM {{s}}.ar_queue_starts
        WHERE ns = %(ns)s AND queue = %(queue)s AND %(limited)s GROUP BY 1),
    candidates AS (
        SELECT seq, {PART} AS part, priority FROM {{s}}.ar_queue
        WHERE ns = %(ns)s AND queue = %(queue)s AND owner IS NULL AND not_before <= {NOW}
        ORDER BY priority, seq LIMIT %(scan)s FOR UPDATE SKIP LOCKED),
    ranked AS (
        SELECT c.seq, c.priority,
            row_number() OVER (PARTITION BY c.part ORDER BY c.priority, c.seq) AS rank,
            least(%(n)s::bigint,
                coalesce(%(concurrency)s::bigint - coalesce(f.n, 0), %(n)s::bigint),
                coalesce(%(limit)s::bigint - coalesce(s.n, 0), %(n)s::bigint)) AS room
        FROM candidates c
        LEFT JOIN flight f ON f.part = c.part LEFT JOIN started s ON s.part = c.part),
    chosen AS (
        SELECT seq FROM ranked WHERE rank <= room ORDER BY priority, seq LIMIT %(n)s),
    taken AS (
        UPDATE {{s}}.ar_queue q SET owner = %(owner)s, expires_at = {NOW} + %(ttl)s::float8,
            deliveries = q.deliveries + 1
        FROM chosen WHERE q.seq = chosen.seq
        RETURNING q.seq, {Q_COLUMNS}),
    logged AS (
        INSERT INTO {{s}}.ar_queue_starts (ns, queue, part, at)
        SELECT %(ns)s, %(queue)s, part, {NOW} FROM taken WHERE %(limited)s)
    SELECT {COLUMNS} FROM taken ORDER BY priority, seq"""
RENEW = f"""UPDATE {{s}}.ar_queue SET expires_at = {NOW} + %s
    WHERE ns = %s AND queue = %s AND run_id = ANY(%s) AND owner = %s RETURNING run_id"""
RELEASE = """UPDATE {s}.ar_queue SET owner = NULL, expires_at = NULL
    WHERE ns = %s AND queue = %s AND run_id = ANY(%s) AND owner = %s"""
FINISH = "DELETE FROM {s}.ar_queue WHERE ns = %s AND queue = %s AND run_id = %s RETURNING 1"
ENTRY = f"SELECT {COLUMNS} FROM {{s}}.ar_queue WHERE ns = %s AND queue = %s AND run_id = %s"
STATS = f"""SELECT queue, owner IS NOT NULL AND expires_at >= {NOW}, not_before > {NOW},
    count(*), min(enqueued_at) FROM {{s}}.ar_queue WHERE ns = %s AND (%s OR queue = %s)
    GROUP BY 1, 2, 3"""


def _statements(flow: PgFlow[Any]) -> list[tuple[str, Any]]:
    """The statements of a one-transaction flow (an unfenced write), without running them."""
    txn = next(flow)
    flow.close()
    return list(txn.statements)


def _entry(row: Any) -> QueueEntry:
    queue, run_id, priority, part, dedup_id, not_before, enqueued_at, deliveries = row
    return QueueEntry(queue, run_id, priority, part, dedup_id, not_before, enqueued_at, deliveries)


class PostgresQueues(QueueBackend):
    """The queues of a `PostgresStore` namespace."""

    def __init__(self, store: Any) -> None:  # a PostgresStore (which imports this module)
        super().__init__(store)
        self.pg = store
        self.db = store.db
        self.ns = store.namespace
        self._tables = Once(self._create_tables)

    def _create_tables(self) -> None:
        def too_new(current: int) -> SchemaVersionError:
            return SchemaVersionError(
                f"PostgreSQL at {self.pg.url} (schema {self.pg.schema!r}) has queue schema "
                f"version {current}; this agentrewind knows up to {QUEUE_VERSION}"
            )

        table = self.pg.render("{s}.ar_queue_version")
        migrations = [self.pg.render(m) for m in MIGRATIONS]
        self.db.migrate(table, migrations, QUEUE_VERSION, too_new)
        enable_on(self.pg, ["ar_queue", "ar_queue_starts"])

    def _write(self, statements: list[tuple[str, Any]], fetch: int | None = None) -> list[Any]:
        self._tables()
        rows: list[Any] = self.pg.write(
            [(self.pg.render(sql), params) for sql, params in statements], fetch=fetch
        )
        return rows

    def _read(self, sql: str, params: Any) -> list[Any]:
        if self.db.version(self.pg.render("{s}.ar_queue_version")) is None:
            return []  # never queued here (and a read-only store creates nothing)
        rows: list[Any] = self.db.fetchall(self.pg.render(sql), params)
        return rows

    def push(self, entry: QueueEntry) -> None:
        e = entry
        row = (self.ns, e.queue, e.run_id, e.priority, e.partition, e.dedup_id, e.not_before)
        for _ in range(3):  # a holder may finish between the insert and the read
            if self._write([(PUSH, row)], fetch=0):
                return
            for run_id, dedup_id in self._read(HOLDERS, (self.ns, e.queue, e.run_id, e.dedup_id)):
                if e.dedup_id is not None and dedup_id == e.dedup_id:
                    raise QueueDeduplicatedError(e.queue, e.dedup_id, run_id)
                raise QueueError(f"run {e.run_id!r} is already in queue {e.queue!r}")
        raise QueueError(f"queue {e.queue!r}: run {e.run_id!r} could not be enqueued")

    def enqueue(self, record: StepRecord, entry: QueueEntry) -> None:
        """The run, its first record and its entry: one transaction in one round trip.

        The statements are the store's own journal write (which creates the run row) and
        end-of-run (status `queued`), both unfenced, then the push; a held deduplication id
        (a unique violation) rolls all three back.
        """
        self._tables()
        e, pg = entry, self.pg
        statements = [
            *_statements(pg._put_steps([record], None, None, None, True)),
            *_statements(pg._end_run(record.run_id, "queued", RunMetrics(), None)),
            (pg.render(PUSH_NEW), (self.ns, e.queue, e.run_id, e.priority, e.partition,
                                   e.dedup_id, e.not_before)),
        ]  # fmt: skip
        try:
            pg.write(statements)
        except StoreError as exc:
            if not isinstance(exc.__cause__, psycopg.errors.UniqueViolation):
                raise
            for run_id, dedup_id in self._read(HOLDERS, (self.ns, e.queue, e.run_id, e.dedup_id)):
                if e.dedup_id is not None and dedup_id == e.dedup_id:
                    raise QueueDeduplicatedError(e.queue, e.dedup_id, run_id) from None
            raise QueueError(f"run {e.run_id!r} is already in queue {e.queue!r}") from None

    def take(
        self, queue: str, limits: QueueLimits, owner: str, n: int, ttl: float
    ) -> list[QueueEntry]:
        if n <= 0:
            return []
        limited = limits.limiter is not None
        statements: list[tuple[str, Any]] = []
        if limits.concurrency is not None or limited:
            statements.append((LOCK, (f"agentrewind-queue:{self.ns}:{queue}",)))
        statements.append((LAPSE, (self.ns, queue)))
        if limited:
            statements.append((FORGET_STARTS, (self.ns, queue, limits.window)))
        params = {
            "ns": self.ns,
            "queue": queue,
            "owner": owner,
            "ttl": ttl,
            "n": n,
            "scan": PARTITION_SCAN if limits.partitioned else n,
            "partitioned": limits.partitioned,
            "counted": limits.concurrency is not None,
            "concurrency": limits.concurrency,
            "limited": limited,
            "limit": None if limits.limiter is None else limits.limiter[0],
        }
        statements.append((TAKE, params))
        return [_entry(r) for r in self._write(statements, fetch=len(statements) - 1)]

    def renew(self, queue: str, owner: str, run_ids: list[str], ttl: float) -> list[str]:
        rows = self._write([(RENEW, (ttl, self.ns, queue, run_ids, owner))], fetch=0)
        held = {r[0] for r in rows}
        return [r for r in run_ids if r in held]

    def release(self, queue: str, owner: str, run_ids: list[str]) -> None:
        self._write([(RELEASE, (self.ns, queue, run_ids, owner))])

    def finish(self, queue: str, run_id: str) -> bool:
        return bool(self._write([(FINISH, (self.ns, queue, run_id))], fetch=0))

    def entry(self, queue: str, run_id: str) -> QueueEntry | None:
        rows = self._read(ENTRY, (self.ns, queue, run_id))
        return _entry(rows[0]) if rows else None

    def stats(self, queue: str | None = None) -> list[QueueStats]:
        return stats_of(self._read(STATS, (self.ns, queue is None, queue or "")), queue)
