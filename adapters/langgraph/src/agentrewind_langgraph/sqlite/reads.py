"""Reads of the SQLite backend: checkpoints with their values and writes, chains, threads.

Reads run on the calling thread's own connection, so they never wait behind a writer (WAL).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

from agentrewind.adapters import SQLiteDatabase

from .._codec import RawTuple, assemble_blob, unpack_versions
from . import sql as _sql

__all__ = ["SQLiteReads"]

_PAGE = 200
"""Checkpoints completed (values and writes fetched) per round of queries."""


class SQLiteReads:
    """The read queries of `SQLiteBackend` (a mixin: it uses the store's per-thread reads)."""

    db: SQLiteDatabase
    ns: str

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
        # Across threads the index on bare ids gives the order; within one thread the primary
        # key must be used (`+` keeps the planner off the id index, which spans every thread).
        cid = "+c.checkpoint_id" if thread_id is not None and cns is None else "c.checkpoint_id"
        for condition, value in (
            ("c.thread_id = ?", thread_id),
            ("c.cns = ?", cns),
            (f"{cid} = ?", checkpoint_id),
            (f"{cid} < ?", before),
        ):
            if value is not None:
                sql.append("AND " + condition)
                args.append(value)
        for key, value in pushdown:
            if '"' in key or "\\" in key:
                continue  # a JSON path cannot quote these; the caller's re-check filters
            sql.append("AND (c.md_type != 'json' OR json_extract(c.metadata, ?) = ?)")
            args += ['$."' + key + '"', value]
        sql.append(f"ORDER BY {cid} DESC")
        if limit is not None:
            sql.append("LIMIT ?")
            args.append(limit)
        with self.db.read() as conn:
            rows = conn.execute(" ".join(sql), args).fetchall()
        for start in range(0, len(rows), _PAGE):
            yield from self._complete(rows[start : start + _PAGE])

    def get_one(
        self, thread_id: str, cns: str, checkpoint_id: str | None, now: float
    ) -> RawTuple | None:
        """The latest (or the named) checkpoint of a thread: what `get_tuple` reads.

        Two statements: the checkpoint with its pending writes, then its channel values.
        """
        with self.db.read() as conn:
            sql = _sql.LATEST_ONE if checkpoint_id is None else _sql.NAMED_ONE
            rows = conn.execute(sql, (self.ns, thread_id, cns, checkpoint_id, now)).fetchall()
            if not rows or rows[0][0] != 0:
                return None
            _, cid, parent, cp_type, cp, versions_s, md_text, md_type, md_blob = rows[0]
            versions = unpack_versions(versions_s)
            values = self._values(conn, thread_id, cns, versions)
        if len(rows) > 2:  # `writes_sort_key` order: task path, task id, index
            rows[1:] = sorted(rows[1:], key=lambda r: (r[1], r[2], r[3]))
        writes = [(task, ch, typ, val) for _, _, task, _, ch, typ, val, _, _ in rows[1:]]
        return RawTuple(thread_id, cns, cid, parent, cp_type, cp, versions, md_text, md_type,
                        md_blob, values, writes)  # fmt: skip

    def _values(
        self, conn: sqlite3.Connection, thread_id: str, cns: str, versions: dict[str, str]
    ) -> dict[str, tuple[str, bytes]]:
        """The stored value of each channel at `versions` (one statement unless deltas)."""
        values: dict[str, tuple[str, bytes]] = {}
        if not versions:
            return values
        if len(versions) > 200:
            got = self.blob_values(thread_id, cns, list(versions.items()), conn=conn)
            return {ch: t for ch, v in versions.items() if (t := got.get((ch, v))) is not None}
        sql = _sql.BLOB_ROWS.format(values=",".join(["(?, ?)"] * len(versions)))
        flat = [x for p in versions.items() for x in p]
        deltas = []
        for ch, ver, kind, _, _, typ, val in conn.execute(sql, (*flat, self.ns, thread_id, cns)):
            if kind == "f":
                values[ch] = (typ, val or b"")
            elif kind == "d":
                deltas.append((ch, ver))
        if deltas:
            for (ch, _), typed in self.blob_values(thread_id, cns, deltas, conn=conn).items():
                if typed is not None:
                    values[ch] = typed
        return values

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
                for cid, ws in self._writes_for(conn, tid, cns, [r[2] for r in grp]).items():
                    writes[(tid, cns, cid)] = ws
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
        with self.db.read() as conn:
            return self._writes_for(conn, thread_id, cns, cids)

    def _writes_for(
        self, conn: sqlite3.Connection, thread_id: str, cns: str, cids: Sequence[str]
    ) -> dict[str, list[tuple[str, str, str, bytes]]]:
        out: dict[str, list[tuple[str, str, str, bytes]]] = {}
        for i in range(0, len(cids), 500):
            chunk = list(cids[i : i + 500])
            sql = _sql.WRITES_FOR.format(marks=",".join("?" * len(chunk)))
            for cid, task, ch, typ, val, _, _ in conn.execute(
                sql, (self.ns, thread_id, cns, *chunk)
            ):
                out.setdefault(cid, []).append((task, ch, typ, val))
        return out
