"""SQLite backend of `RewindSaver`: `lg_` tables in the store's database file.

Writes from sync callers run inline under an in-process lock (so threads of one process never
sleep in SQLite's busy handler); writes from async callers go to one writer thread that commits
whatever has queued up in one transaction (group commit). Reads use each thread's own
connection, so they never wait behind a writer (WAL).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from agentrewind.errors import SchemaVersionError
from agentrewind.stores._sqlite_db import SQLiteDatabase

from . import _sql
from ._codec import (
    BlobRow,
    CheckpointInfo,
    PutRow,
    RawTuple,
    WriteRow,
    assemble_blob,
    pack_versions,
    plan_removal,
    unpack_versions,
)

T = TypeVar("T")
Txn = Callable[[sqlite3.Connection], T]
_PAGE = 200
_MAX_BATCH = 64
_TOUCH_EVERY = 1.0
"""Without a TTL, a thread's `updated_at` is refreshed at most this often (seconds) by one
process: the refresh rewrites two b-tree pages, more than the checkpoint itself."""


class _SharedConnection(SQLiteDatabase):
    """The store's file with one connection for every thread's writes.

    LangGraph calls `put`/`put_writes` from short-lived executor threads: a connection per
    thread would open (and keep) a new one for nearly every graph run. Callers serialise
    their use with the backend's lock.
    """

    def __init__(self, db: SQLiteDatabase) -> None:
        super().__init__(
            db.path, durability=db.durability, busy_timeout=db.busy_timeout, retries=db.retries
        )
        self._shared: sqlite3.Connection | None = None

    def connection(self) -> sqlite3.Connection:
        """The one shared connection, opened on first use."""
        if self._shared is None:
            self._shared = super().connection()
        return self._shared


class SQLiteBackend:
    """The `lg_` tables of one SQLite store namespace."""

    def __init__(self, store: Any, *, tombstone_ttl: float) -> None:
        self.store = store
        self.db = store.db
        self._wdb = _SharedConnection(store.db)
        self.ns: str = store.namespace
        self.tombstone_ttl = tombstone_ttl
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[tuple[Txn[Any], concurrent.futures.Future[Any]] | None]
        self._queue = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._writer_lock = threading.Lock()
        self._touched: dict[str, float] = {}
        self.migrate()

    # -- schema ------------------------------------------------------------------------------
    def migrate(self) -> None:
        """Create or upgrade the `lg_` tables; refuse a newer layout."""
        with self.write() as conn:
            conn.execute(_sql.SCHEMA_TABLE)
            row = conn.execute(_sql.GET_SCHEMA).fetchone()
            current = 0 if row is None else int(row[0])
            if current > _sql.SCHEMA_VERSION:
                raise SchemaVersionError(
                    f"{self.db.path}: LangGraph tables have schema version {current}; this "
                    f"agentrewind-langgraph knows up to {_sql.SCHEMA_VERSION}: upgrade it"
                )
            if current < _sql.SCHEMA_VERSION:
                for statements in _sql.MIGRATIONS[current : _sql.SCHEMA_VERSION]:
                    for statement in statements:
                        conn.execute(statement)
                conn.execute(_sql.SET_SCHEMA[0])
                conn.execute(_sql.SET_SCHEMA[1], (_sql.SCHEMA_VERSION,))

    # -- write paths -------------------------------------------------------------------------
    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One `BEGIN IMMEDIATE` transaction, serialised with this process's other writers."""
        with self._lock, self._wdb.write() as conn:
            yield conn

    def run(self, txn: Txn[T]) -> T:
        """Run `txn(conn)` in its own transaction on the calling thread."""
        with self.write() as conn:
            return txn(conn)

    def execute(self, txn: Txn[T]) -> T:
        """Run a write operation from a sync caller."""
        return self.run(txn)

    async def aexecute(self, txn: Txn[T]) -> T:
        """Run a write operation from async code, on the group-committing writer thread."""
        return await asyncio.wrap_future(self.submit(txn))

    def submit(self, txn: Txn[T]) -> concurrent.futures.Future[T]:
        """Queue `txn(conn)` for the writer thread (group commit); returns its future."""
        fut: concurrent.futures.Future[T] = concurrent.futures.Future()
        if self._writer is None:
            with self._writer_lock:
                if self._writer is None:
                    self._writer = threading.Thread(
                        target=self._write_loop, name="agentrewind-lg-writer", daemon=True
                    )
                    self._writer.start()
        self._queue.put((txn, fut))
        return fut

    def _write_loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            batch = [item]
            while len(batch) < _MAX_BATCH:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)
                    break
                batch.append(nxt)
            results: list[tuple[bool, Any]] = []
            try:
                with self.write() as conn:
                    for i, (txn, _) in enumerate(batch):
                        conn.execute(f"SAVEPOINT j{i}")
                        try:
                            results.append((True, txn(conn)))
                            conn.execute(f"RELEASE j{i}")
                        except Exception as exc:
                            conn.execute(f"ROLLBACK TO j{i}")
                            conn.execute(f"RELEASE j{i}")
                            results.append((False, exc))
            except BaseException as exc:
                for _, fut in batch:
                    fut.set_exception(exc)
                continue
            for (_, fut), (ok, value) in zip(batch, results, strict=True):
                if ok:
                    fut.set_result(value)
                else:
                    fut.set_exception(value)

    def close(self) -> None:
        """Stop the writer thread (after it drains its queue)."""
        if self._writer is not None:
            self._queue.put(None)
            self._writer.join(timeout=5)
            self._writer = None
        with self._lock:
            self._wdb.close()

    # -- transactions ------------------------------------------------------------------------
    def _tombstone(self, conn: sqlite3.Connection, thread_id: str, now: float) -> float | None:
        row = conn.execute(
            _sql.TOMBSTONE, (self.ns, thread_id, now - self.tombstone_ttl)
        ).fetchone()
        return None if row is None else float(row[0])

    def _exists(self, conn: sqlite3.Connection, thread_id: str, cns: str, cid: str) -> bool:
        args = (self.ns, thread_id, cns, cid)
        return conn.execute(_sql.CHECKPOINT_EXISTS, args).fetchone() is not None

    def put_op(self, row: PutRow, now: float, ttl: float | None) -> Txn[bool]:
        """The transaction storing one checkpoint and its changed channels."""

        def txn(conn: sqlite3.Connection) -> bool:
            ns, tid, cns = self.ns, row.thread_id, row.cns
            tomb = self._tombstone(conn, tid, now)
            if tomb is not None:
                if row.ts <= tomb or (
                    row.parent_id is not None and not self._exists(conn, tid, cns, row.parent_id)
                ):
                    return False  # a late write of the deleted history
                conn.execute(_sql.CLEAR_TOMBSTONE, (ns, tid))
            blob_rows = []
            for b in row.blobs:
                if b.kind == "d":
                    base = (ns, tid, cns, b.channel, b.base)
                    if conn.execute(_sql.BLOB_EXISTS, base).fetchone() is None:
                        b = BlobRow(b.channel, b.version, "f", None, 0, b.type, b.full or b"")
                blob_rows.append(
                    (ns, tid, cns, b.channel, b.version, b.kind, b.base, b.n, b.type, b.value)
                )
            conn.execute(
                _sql.INSERT_CHECKPOINT,
                (ns, tid, cns, row.checkpoint_id, row.parent_id, row.run_id, row.cp_type,
                 row.checkpoint, pack_versions(row.versions), row.md_text, row.md_type,
                 row.md_blob),
            )  # fmt: skip
            if blob_rows:
                conn.executemany(_sql.INSERT_BLOB, blob_rows)
            if row.run_id is not None:
                conn.execute(_sql.ADD_RUN, (ns, row.run_id, tid))
            self._touch(conn, tid, now, ttl, force=tomb is not None)
            return True

        return txn

    def _touch(
        self,
        conn: sqlite3.Connection,
        thread_id: str,
        now: float,
        ttl: float | None,
        *,
        force: bool,
    ) -> None:
        """Record the write time (and TTL) of a thread; without a TTL, at most once a second."""
        if ttl is None and not force and now - self._touched.get(thread_id, 0.0) < _TOUCH_EVERY:
            conn.execute(_sql.ENSURE_THREAD, (self.ns, thread_id, now, now))
            return
        conn.execute(_sql.TOUCH_THREAD, (self.ns, thread_id, now, ttl))
        if len(self._touched) > 10_000:
            self._touched.clear()
        self._touched[thread_id] = now

    def put_writes_op(
        self,
        thread_id: str,
        cns: str,
        cid: str,
        rows: Sequence[WriteRow],
        now: float,
        ttl: float | None,
    ) -> Txn[bool]:
        """The transaction storing the pending writes of one task."""

        def txn(conn: sqlite3.Connection) -> bool:
            ns = self.ns
            tomb = self._tombstone(conn, thread_id, now) is not None
            if tomb and not self._exists(conn, thread_id, cns, cid):
                return False
            for w in rows:
                sql = _sql.INSERT_WRITE_REPLACE if w.idx < 0 else _sql.INSERT_WRITE_KEEP
                conn.execute(
                    sql,
                    (ns, thread_id, cns, cid, w.task_id, w.idx, w.task_path, w.channel, w.type,
                     w.value),
                )  # fmt: skip
            self._touch(conn, thread_id, now, ttl, force=tomb)
            return True

        return txn

    def delete_thread_op(self, thread_id: str, now: float) -> Txn[None]:
        """The transaction deleting a thread and leaving a tombstone."""

        def txn(conn: sqlite3.Connection) -> None:
            for statement in _sql.DELETE_THREAD:
                conn.execute(statement, (self.ns, thread_id))
            conn.execute(_sql.SET_TOMBSTONE, (self.ns, thread_id, now))

        return txn

    def copy_thread_op(self, src: str, dst: str, now: float, ttl: float | None) -> Txn[None]:
        """The transaction copying every checkpoint, blob and write of `src` to `dst`."""

        def txn(conn: sqlite3.Connection) -> None:
            for statement in _sql.DELETE_THREAD:
                conn.execute(statement, (self.ns, dst))
            for statement in _sql.COPY_THREAD:
                conn.execute(statement, (self.ns, src, dst))
            conn.execute(_sql.CLEAR_TOMBSTONE, (self.ns, dst))
            conn.execute(_sql.TOUCH_THREAD, (self.ns, dst, now, ttl))

        return txn

    def _remove_txn(
        self,
        conn: sqlite3.Connection,
        thread_id: str,
        *,
        keep_last: int | None = None,
        run_ids: set[str] | None = None,
    ) -> int:
        cps = [
            CheckpointInfo(cns, cid, parent, unpack_versions(versions), run_id)
            for cns, cid, parent, versions, run_id in conn.execute(
                _sql.THREAD_CHECKPOINTS, (self.ns, thread_id)
            )
        ]
        blobs = {
            (cns, ch, ver): (kind, base)
            for cns, ch, ver, kind, base in conn.execute(
                _sql.THREAD_BLOB_KEYS, (self.ns, thread_id)
            )
        }
        doomed = None
        if run_ids is not None:
            doomed = {(c.cns, c.checkpoint_id) for c in cps if c.run_id in run_ids}
        drop_cps, drop_blobs = plan_removal(cps, blobs, keep_last=keep_last, doomed=doomed)
        for cns, cid in drop_cps:
            for statement in _sql.DELETE_CHECKPOINT:
                conn.execute(statement, (self.ns, thread_id, cns, cid))
        conn.executemany(
            _sql.DELETE_BLOB, [(self.ns, thread_id, cns, ch, v) for cns, ch, v in drop_blobs]
        )
        return len(drop_cps)

    def prune_op(self, thread_ids: Sequence[str], keep_last: int) -> Txn[int]:
        """The transaction keeping the newest `keep_last` checkpoints per namespace."""
        return lambda conn: sum(self._remove_txn(conn, t, keep_last=keep_last) for t in thread_ids)

    def delete_for_runs_op(self, run_ids: Sequence[str]) -> Txn[int]:
        """The transaction deleting the checkpoints written by `run_ids`."""

        def txn(conn: sqlite3.Connection) -> int:
            threads = {t for r in run_ids for (t,) in conn.execute(_sql.RUN_THREADS, (self.ns, r))}
            return sum(self._remove_txn(conn, t, run_ids=set(run_ids)) for t in threads)

        return txn

    def purge_expired_op(self, now: float) -> Txn[int]:
        """The transaction deleting threads whose TTL ran out, and old tombstones."""

        def txn(conn: sqlite3.Connection) -> int:
            expired = conn.execute(_sql.EXPIRED_THREADS, (now,)).fetchall()
            for ns, thread_id in expired:
                for statement in _sql.DELETE_THREAD:
                    conn.execute(statement, (ns, thread_id))
            conn.execute(_sql.PURGE_TOMBSTONES, (now - self.tombstone_ttl,))
            return len(expired)

        return txn

    # -- reads -------------------------------------------------------------------------------
    def thread_ids(self) -> list[str]:
        """Every live thread of the namespace."""
        with self.db.read() as conn:
            rows = conn.execute(
                "SELECT DISTINCT thread_id FROM lg_checkpoints WHERE ns = ?", (self.ns,)
            ).fetchall()
        return [r[0] for r in rows]

    def list_threads(self, limit: int, now: float) -> list[tuple[str, float, float, float | None]]:
        """`(thread_id, created_at, updated_at, expires_at)`, most recently updated first."""
        with self.db.read() as conn:
            rows = conn.execute(_sql.LIST_THREADS, (self.ns, now, limit)).fetchall()
        return [
            (str(t), float(c), float(u), None if e is None else float(e)) for t, c, u, e in rows
        ]

    def query(
        self,
        *,
        thread_id: str | None,
        cns: str | None,
        checkpoint_id: str | None,
        before: str | None,
        pushdown: Sequence[tuple[str, Any]],
        limit: int | None,
        now: float,
    ) -> Iterator[RawTuple]:
        """Checkpoints newest first, complete with channel values and pending writes."""
        sql = [_sql.SELECT_CHECKPOINTS]
        args: list[Any] = [self.ns, now]
        if thread_id is not None:
            sql.append("AND c.thread_id = ?")
            args.append(thread_id)
        if cns is not None:
            sql.append("AND c.cns = ?")
            args.append(cns)
        if checkpoint_id is not None:
            sql.append("AND c.checkpoint_id = ?")
            args.append(checkpoint_id)
        if before is not None:
            sql.append("AND c.checkpoint_id < ?")
            args.append(before)
        for key, value in pushdown:
            sql.append("AND (c.md_type != 'json' OR json_extract(c.metadata, ?) = ?)")
            args += ['$."' + key.replace('"', '\\"') + '"', value]
        sql.append("ORDER BY c.checkpoint_id DESC")
        if limit is not None:
            sql.append("LIMIT ?")
            args.append(limit)
        with self.db.read() as conn:
            rows = conn.execute(" ".join(sql), args).fetchall()
        for start in range(0, len(rows), _PAGE):
            yield from self._complete(rows[start : start + _PAGE])

    def _complete(self, rows: list[tuple[Any, ...]]) -> list[RawTuple]:
        groups: dict[tuple[str, str], list[tuple[Any, ...]]] = {}
        for r in rows:
            groups.setdefault((r[0], r[1]), []).append(r)
        values: dict[tuple[str, str], dict[tuple[str, str], tuple[str, bytes] | None]] = {}
        writes: dict[tuple[str, str, str], list[tuple[str, str, str, bytes]]] = {}
        with self.db.read() as conn:
            for (tid, cns), grp in groups.items():
                pairs = {(ch, v) for r in grp for ch, v in unpack_versions(r[6]).items()}
                values[(tid, cns)] = self.blob_values(tid, cns, list(pairs), conn=conn)
                cids = [r[2] for r in grp]
                for i in range(0, len(cids), 500):
                    chunk = cids[i : i + 500]
                    sql = _sql.WRITES_FOR.format(marks=",".join("?" * len(chunk)))
                    for cid, task, ch, typ, val, _, _ in conn.execute(
                        sql, (self.ns, tid, cns, *chunk)
                    ):
                        writes.setdefault((tid, cns, cid), []).append((task, ch, typ, val))
        out = []
        for tid, cns, cid, parent, cp_type, cp, versions_s, md_text, md_type, md_blob in rows:
            versions = unpack_versions(versions_s)
            got = values[(tid, cns)]
            vals = {}
            for ch, v in versions.items():
                typed = got.get((ch, v))
                if typed is not None:
                    vals[ch] = typed
            out.append(
                RawTuple(tid, cns, cid, parent, cp_type, cp, versions, md_text, md_type, md_blob,
                         vals, writes.get((tid, cns, cid), []))
            )  # fmt: skip
        return out

    def blob_values(
        self,
        thread_id: str,
        cns: str,
        pairs: Sequence[tuple[str, str]],
        *,
        conn: sqlite3.Connection | None = None,
    ) -> dict[tuple[str, str], tuple[str, bytes] | None]:
        """Stored values of `(channel, version)` pairs; None marks an empty one, absent: no row."""
        out: dict[tuple[str, str], tuple[str, bytes] | None] = {}
        if not pairs:
            return out
        with contextlib.ExitStack() as stack:
            if conn is None:
                conn = stack.enter_context(self.db.read())
            key = (self.ns, thread_id, cns)
            deltas: list[tuple[str, str]] = []
            for i in range(0, len(pairs), 200):
                chunk = pairs[i : i + 200]
                sql = _sql.BLOB_ROWS.format(values=",".join(["(?, ?)"] * len(chunk)))
                flat = [x for p in chunk for x in p]
                for ch, ver, kind, _, n, typ, val in conn.execute(sql, (*flat, *key)):
                    if kind == "d":
                        deltas.append((ch, ver))
                    else:
                        out[(ch, ver)] = assemble_blob([(kind, n, typ, val)])
            for i in range(0, len(deltas), 200):
                chunk = deltas[i : i + 200]
                sql = _sql.BLOB_CHAIN.format(values=",".join(["(?, ?)"] * len(chunk)))
                flat = [x for p in chunk for x in p]
                chains: dict[tuple[str, str], list[tuple[int, str, int, str, bytes]]] = {}
                for wc, wv, depth, kind, n, typ, val in conn.execute(sql, (*flat, *key, *key)):
                    chains.setdefault((wc, wv), []).append((depth, kind, n, typ, val))
                for pair, chain in chains.items():
                    chain.sort()
                    out[pair] = assemble_blob([(k, n, t, v) for _, k, n, t, v in chain])
        return out

    def parent_chain(
        self, thread_id: str, cns: str, checkpoint_id: str
    ) -> list[tuple[str, str | None, dict[str, str]]]:
        """`(id, parent_id, versions)` from the checkpoint up to the root."""
        with self.db.read() as conn:
            rows = conn.execute(_sql.PARENT_CHAIN, (self.ns, thread_id, cns, checkpoint_id))
            return [(cid, parent, unpack_versions(v)) for cid, parent, v in rows]

    def writes_for(
        self, thread_id: str, cns: str, cids: Sequence[str]
    ) -> dict[str, list[tuple[str, str, str, bytes]]]:
        """Pending writes of several checkpoints, each list in `writes_sort_key` order."""
        out: dict[str, list[tuple[str, str, str, bytes]]] = {}
        with self.db.read() as conn:
            for i in range(0, len(cids), 500):
                chunk = list(cids[i : i + 500])
                sql = _sql.WRITES_FOR.format(marks=",".join("?" * len(chunk)))
                for cid, task, ch, typ, val, _, _ in conn.execute(
                    sql, (self.ns, thread_id, cns, *chunk)
                ):
                    out.setdefault(cid, []).append((task, ch, typ, val))
        return out
