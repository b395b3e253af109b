"""Reads of the PostgreSQL backend of `RewindSaver` (a mixin of `backend.PostgresBackend`).

The latest checkpoint, with its values and pending writes, is one statement by primary key;
`query` is a `PostgresFlow`, run by the store's sync pool (`query`) or, for the async API, on
the running loop's `AsyncConnectionPool` (`aquery`, no thread).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentrewind.adapters import PostgresFlow, PostgresTxn
from agentrewind.adapters import PostgresTextArray as Texts

from .._codec import RawTuple, assemble_blob

__all__ = ["PostgresReads"]


class PostgresReads:
    """The reads of `PostgresBackend` (its `store`, `db`, `ns`, `sql` and `_sql`)."""

    store: Any
    db: Any
    ns: str
    _sql: dict[str, Any]

    def sql(self, name: str) -> Any:  # pragma: no cover - the backend's
        raise NotImplementedError

    def _fetch(self, name: str, args: dict[str, Any], **fmt: str) -> list[Any]:
        sql = self.sql(name)
        if fmt:
            sql = sql.format(**fmt)
        return self.db.fetchall(sql, args)  # type: ignore[no-any-return]

    # -- reads -------------------------------------------------------------------------------
    def thread_ids(self) -> list[str]:
        """Every thread of the namespace."""
        return self.store.drive(self._thread_ids())  # type: ignore[no-any-return]

    async def athread_ids(self) -> list[str]:
        """Async twin of `thread_ids` (on the running loop's async pool)."""
        return await self.store.adrive(self._thread_ids())  # type: ignore[no-any-return]

    def _thread_ids(self) -> PostgresFlow[list[str]]:
        rows = yield PostgresTxn([(self.sql("THREAD_IDS"), {"ns": self.ns})], 0, write=False)
        return [r[0] for r in rows]

    def list_threads(self, limit: int, now: float) -> list[tuple[str, float, float, float | None]]:
        """`(thread_id, created_at, updated_at, expires_at)`, most recently updated first."""
        rows = self._fetch("LIST_THREADS", {"ns": self.ns, "now": now, "limit": limit})
        return [
            (str(t), float(c), float(u), None if e is None else float(e)) for t, c, u, e in rows
        ]

    def query(self, **kw: Any) -> list[RawTuple]:
        """Checkpoints newest first, complete with channel values and pending writes."""
        return self.store.drive(self._query(**kw))  # type: ignore[no-any-return]

    async def aquery(self, **kw: Any) -> list[RawTuple]:
        """Async twin of `query` (on the running loop's async pool: no thread)."""
        await self._settled()
        return await self.store.adrive(self._query(**kw))  # type: ignore[no-any-return]

    async def _settled(self) -> None:  # pragma: no cover - the backend's
        raise NotImplementedError

    def _query(
        self,
        *,
        thread_id: str | None,
        cns: str | None,
        checkpoint_id: str | None,
        before: str | None,
        pushdown: Sequence[tuple[str, Any]],
        limit: int | None,
        now: float,
    ) -> PostgresFlow[list[RawTuple]]:
        args: dict[str, Any] = {"ns": self.ns, "now": now}
        where = []
        for name, condition, value in (
            ("tid", "c.thread_id = %(tid)s", thread_id),
            ("cns", "c.cns = %(cns)s", cns),
            ("cid", "c.checkpoint_id = %(cid)s", checkpoint_id),
            ("before", "c.checkpoint_id < %(before)s", before),
        ):
            if value is not None:
                where.append("AND " + condition)
                args[name] = value
        if pushdown:
            # GIN (jsonb_path_ops); rows whose metadata needed serde are checked in Python.
            where.append("AND (c.metadata @> %(filter)s::jsonb OR c.metadata IS NULL)")
            args["filter"] = json.dumps(dict(pushdown))
        if limit is not None:
            args["limit"] = limit
        key = f"QUERY:{'|'.join(where)}:{limit is not None}"
        sql = self._sql.get(key)
        if sql is None:
            inner = self.sql("SELECT_CHECKPOINTS").format(
                live=self.sql("LIVE"),
                where=" ".join(where),
                limit="LIMIT %(limit)s" if limit is not None else "",
            )
            sql = self._sql[key] = self.sql("QUERY").format(inner=inner)
        rows = yield PostgresTxn([(sql, args)], 0, write=False)
        return [_raw(r) for r in rows]

    def blob_values(
        self, thread_id: str, cns: str, pairs: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], tuple[str, bytes] | None]:
        """Stored values of `(channel, version)` pairs; None marks an empty one, absent: no row."""
        if not pairs:
            return {}
        args = {
            "ns": self.ns,
            "tid": thread_id,
            "cns": cns,
            "chs": Texts([c for c, _ in pairs]),
            "vers": Texts([v for _, v in pairs]),
        }
        chains: dict[tuple[str, str], list[tuple[int, str, int, str, bytes]]] = {}
        for wc, wv, depth, kind, n, typ, val in self._fetch("BLOB_CHAIN", args):
            chains.setdefault((wc, wv), []).append((depth, kind, n, typ, val))
        out: dict[tuple[str, str], tuple[str, bytes] | None] = {}
        for pair, chain in chains.items():
            chain.sort()
            out[pair] = assemble_blob([(k, n, t, v) for _, k, n, t, v in chain])
        return out

    def parent_chain(
        self, thread_id: str, cns: str, checkpoint_id: str
    ) -> list[tuple[str, str | None, dict[str, str]]]:
        """`(id, parent_id, versions)` from the checkpoint up to the root."""
        args = {"ns": self.ns, "tid": thread_id, "cns": cns, "cid": checkpoint_id}
        return [(c, p, json.loads(v)) for c, p, v in self._fetch("PARENT_CHAIN", args)]

    def writes_for(
        self, thread_id: str, cns: str, cids: Sequence[str]
    ) -> dict[str, list[tuple[str, str, str, bytes]]]:
        """Pending writes of several checkpoints, each list in `writes_sort_key` order."""
        out: dict[str, list[tuple[str, str, str, bytes]]] = {}
        if not cids:
            return out
        args = {"ns": self.ns, "tid": thread_id, "cns": cns, "cids": list(cids)}
        for cid, task, ch, typ, val in self._fetch("WRITES_FOR", args):
            out.setdefault(cid, []).append((task, ch, typ, bytes(val)))
        return out


def _raw(r: tuple[Any, ...]) -> RawTuple:
    (tid, cns, cid, parent, cp_type, cp, versions, md, md_type, md_blob,
     b_ch, b_kind, b_n, b_type, b_val, w_task, w_ch, w_type, w_val) = r  # fmt: skip
    if md is None and md_type == "json" and md_blob is not None:
        md, md_blob = bytes(md_blob).decode(), None
    values: dict[str, tuple[str, bytes]] = {}
    if b_ch:
        i = 0
        while i < len(b_ch):
            j = i
            while j < len(b_ch) and b_ch[j] == b_ch[i]:
                j += 1
            chain = [(b_kind[k], b_n[k], b_type[k], b_val[k]) for k in range(i, j)]
            typed = assemble_blob(chain)
            if typed is not None:
                values[b_ch[i]] = (typed[0], bytes(typed[1]))
            i = j
    writes = (
        [(w_task[k], w_ch[k], w_type[k], bytes(w_val[k])) for k in range(len(w_task))]
        if w_task
        else []
    )
    return RawTuple(
        tid, cns, cid, parent, cp_type, bytes(cp), json.loads(versions), md, md_type,
        None if md_blob is None else bytes(md_blob), values, writes,
    )  # fmt: skip
