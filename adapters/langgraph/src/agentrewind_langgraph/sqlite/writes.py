"""Write transactions of the SQLite backend: checkpoints, pending writes, deletes, retention.

Each `*_op` returns a transaction, a function of an open connection, that
`SQLiteBackend` commits (alone or grouped with others that queued up meanwhile).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import TypeVar

from .._codec import (
    BlobRow,
    CheckpointInfo,
    PutRow,
    WriteRow,
    pack_versions,
    plan_removal,
    unpack_versions,
)
from .._defer import HeldWrites
from . import sql as _sql

__all__ = ["SQLiteWrites", "Txn"]

T = TypeVar("T")
Txn = Callable[[sqlite3.Connection], T]
_TOUCH_EVERY = 1.0
"""Without a TTL, a thread's `updated_at` is refreshed at most this often (seconds) by one
process: the refresh rewrites two b-tree pages, more than the checkpoint itself."""


class SQLiteWrites:
    """The write transactions of `SQLiteBackend` (a mixin: it holds no connection)."""

    ns: str
    tombstone_ttl: float
    _touched: dict[str, float]
    _known_runs: set[tuple[str, str]]
    _staged: list[Callable[[], None]]

    def _after_commit(self, fn: Callable[[], None]) -> None:
        """Run `fn` once the current transaction commits (never if it rolls back)."""
        self._staged.append(fn)

    def _tombstone(self, conn: sqlite3.Connection, thread_id: str, now: float) -> float | None:
        row = conn.execute(
            _sql.TOMBSTONE, (self.ns, thread_id, now - self.tombstone_ttl)
        ).fetchone()
        return None if row is None else float(row[0])

    def _exists(self, conn: sqlite3.Connection, thread_id: str, cns: str, cid: str) -> bool:
        args = (self.ns, thread_id, cns, cid)
        return conn.execute(_sql.CHECKPOINT_EXISTS, args).fetchone() is not None

    def put_op(
        self, row: PutRow, now: float, ttl: float | None, writes: Sequence[HeldWrites] = ()
    ) -> Txn[bool]:
        """The transaction storing one checkpoint and its changed channels.

        In the common case it runs two statements: the checkpoint (guarded by the tombstone
        check inside the same INSERT) and its values. The thread row and the (run, thread)
        pair are written only when this process has not yet committed them (see `_known`).
        `writes` (pending writes the saver held for the parent) go in the same transaction.
        """
        before = [
            self.put_writes_op(w.thread_id, w.cns, w.checkpoint_id, w.rows, w.now, ttl)
            for w in writes
        ]

        def txn(conn: sqlite3.Connection) -> bool:
            for w in before:
                w(conn)
            ns, tid, cns = self.ns, row.thread_id, row.cns
            cp = (ns, tid, cns, row.checkpoint_id, row.parent_id, row.run_id, row.cp_type,
                  row.checkpoint, pack_versions(row.versions), row.md_text, row.md_type,
                  row.md_blob)  # fmt: skip
            tomb = None
            since = now - self.tombstone_ttl
            if not conn.execute(_sql.INSERT_LIVE_CHECKPOINT, (*cp, since)).rowcount:
                # A live tombstone: only a newer history that follows it may write.
                tomb = self._tombstone(conn, tid, now)
                parent = row.parent_id
                if tomb is not None and (
                    row.ts <= tomb
                    or (parent is not None and not self._exists(conn, tid, cns, parent))
                ):
                    return False  # a late write of the deleted history
                conn.execute(_sql.CLEAR_TOMBSTONE, (ns, tid))
                conn.execute(_sql.INSERT_CHECKPOINT, cp)
                self._forget(tid)
            blob_rows = []
            for b in row.blobs:
                if b.kind == "d":
                    base = (ns, tid, cns, b.channel, b.base)
                    if conn.execute(_sql.BLOB_EXISTS, base).fetchone() is None:
                        b = BlobRow(b.channel, b.version, "f", None, 0, b.type, b.full or b"")
                blob_rows.append(
                    (ns, tid, cns, b.channel, b.version, b.kind, b.base, b.n, b.type, b.value)
                )
            if blob_rows:
                conn.executemany(_sql.INSERT_BLOB, blob_rows)
            if row.run_id is not None and (row.run_id, tid) not in self._known_runs:
                conn.execute(_sql.ADD_RUN, (ns, row.run_id, tid))
                pair = (row.run_id, tid)
                self._after_commit(lambda: self._known_runs.add(pair))
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
        """Record the write time (and TTL) of a thread; without a TTL, at most once a second.

        A thread this process has committed a touch for (and not deleted since) needs no row
        in between: `_touched` holds the threads known to exist, with their last touch time.
        """
        if ttl is None and not force:
            last = self._touched.get(thread_id)
            if last is not None and now - last < _TOUCH_EVERY:
                return
        conn.execute(_sql.TOUCH_THREAD, (self.ns, thread_id, now, ttl))
        self._after_commit(lambda: self._remember(thread_id, now))

    def _remember(self, thread_id: str, now: float) -> None:
        if len(self._touched) > 10_000:
            self._touched.clear()
        self._touched[thread_id] = now

    def _forget(self, thread_id: str | None = None) -> None:
        """Drop what this process knows exists: of one thread, or (None) of every thread.

        Called inside a transaction; it also drops what the transaction's batch would have
        learnt at commit, so an earlier write in the same batch cannot bring it back.
        """
        self._staged.clear()
        if thread_id is None:
            self._touched.clear()
            self._known_runs.clear()
            return
        self._touched.pop(thread_id, None)
        self._known_runs.difference_update([p for p in self._known_runs if p[1] == thread_id])

    def put_writes_op(
        self,
        thread_id: str,
        cns: str,
        cid: str,
        rows: Sequence[WriteRow],
        now: float,
        ttl: float | None,
    ) -> Txn[bool]:
        """The transaction storing the pending writes of one task.

        The tombstone check is part of each INSERT; only when some row was not stored (a
        duplicate, or a deleted thread) does it look at the tombstone to tell which.
        """

        def txn(conn: sqlite3.Connection) -> bool:
            ns = self.ns
            since = now - self.tombstone_ttl
            stored = 0
            # Special writes (idx < 0) replace, regular ones keep the first; one call each.
            keep: list[tuple[object, ...]] = []
            replace: list[tuple[object, ...]] = []
            for w in rows:
                (replace if w.idx < 0 else keep).append(
                    (ns, thread_id, cns, cid, w.task_id, w.idx, w.task_path, w.channel, w.type,
                     w.value, since)
                )  # fmt: skip
            if keep:
                stored += conn.executemany(_sql.INSERT_LIVE_WRITE_KEEP, keep).rowcount
            if replace:
                stored += conn.executemany(_sql.INSERT_LIVE_WRITE_REPLACE, replace).rowcount
            tomb = False
            if stored < len(rows):
                tomb = self._tombstone(conn, thread_id, now) is not None
                if tomb and not self._exists(conn, thread_id, cns, cid):
                    return False
            self._touch(conn, thread_id, now, ttl, force=tomb)
            return True

        return txn

    def delete_thread_op(self, thread_id: str, now: float) -> Txn[None]:
        """The transaction deleting a thread and leaving a tombstone."""

        def txn(conn: sqlite3.Connection) -> None:
            self._forget(thread_id)
            for statement in _sql.DELETE_THREAD:
                conn.execute(statement, (self.ns, thread_id))
            conn.execute(_sql.SET_TOMBSTONE, (self.ns, thread_id, now))

        return txn

    def copy_thread_op(self, src: str, dst: str, now: float, ttl: float | None) -> Txn[None]:
        """The transaction copying every checkpoint, blob and write of `src` to `dst`."""

        def txn(conn: sqlite3.Connection) -> None:
            self._forget(dst)
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
        self._forget()
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
            self._forget()
            expired = conn.execute(_sql.EXPIRED_THREADS, (now,)).fetchall()
            for ns, thread_id in expired:
                for statement in _sql.DELETE_THREAD:
                    conn.execute(statement, (ns, thread_id))
            conn.execute(_sql.PURGE_TOMBSTONES, (now - self.tombstone_ttl,))
            return len(expired)

        return txn
