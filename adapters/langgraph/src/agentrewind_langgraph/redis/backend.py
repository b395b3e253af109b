"""Redis backend of `RewindSaver`: one Lua script per write, one per read (see `keys`).

Every operation is a flow (a generator yielding `RedisScript`/`RedisCommand`s, see
`agentrewind.adapters`): sync callers drive it on the store's client, async callers on its
`redis.asyncio` client, where scripts queued by concurrent writers share one pipeline.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import ormsgpack

from agentrewind.adapters import RedisCommand, RedisFlow, RedisPipeline, RedisScript

from .._codec import (
    BlobRow,
    CheckpointInfo,
    PutRow,
    RawTuple,
    WriteRow,
    assemble_blob,
    plan_removal,
)
from .._defer import HeldWrites
from . import keys as K

T = TypeVar("T")
Op = Callable[[], RedisFlow[T]]
"""A write operation: makes the flow that runs it (on either transport)."""
_PAGE = 200
_SCRIPTS = (
    "PUT", "PUT_WRITES", "DELETE", "RESTORE", "REMOVE", "HEADS", "QUERY", "BLOBS", "CHAIN", "WRITES"
)  # fmt: skip
"""The SHA1s the store registers these scripts under (`register_scripts`)."""
_TH = K.DATA_PARTS.index("th")
_READ = _TH  # read scripts use only the keys before `th`: send no more


def _s(b: bytes | str) -> str:
    return b.decode() if isinstance(b, bytes) else b


def _blob_record(b: BlobRow) -> bytes:
    head = f"{b.kind}{b.base or ''}\0{b.n}\0{b.type}\0".encode()
    return head + (b.value or b"")


def _parse_blob(rec: bytes) -> tuple[str, int, str, bytes]:
    kind = rec[:1].decode()
    _, n, typ, value = rec[1:].split(b"\0", 3)
    return kind, int(n), typ.decode(), value


def _parse_write(field: bytes, rec: bytes) -> tuple[str, str, str, bytes]:
    task_id = field.split(b"\0")[3].decode()
    channel, typ, value = rec.split(b"\0", 2)
    return task_id, channel.decode(), typ.decode(), value


class RedisBackend:
    """LangGraph threads in Redis or Redis Cluster, next to the core store's keys."""

    def __init__(self, store: Any, *, tombstone_ttl: float) -> None:
        self.store = store
        self.client = store.client
        self.cluster: bool = bool(store.cluster)
        self.tombstone_ttl = tombstone_ttl
        self.registry: str = store.namespace_key(K.REGISTRY)
        store.register_scripts({f"lg:{n}": getattr(K, n) for n in _SCRIPTS})

    # -- plumbing ----------------------------------------------------------------------------
    def _keys(self, thread_id: str, *, registry: bool = False) -> list[str]:
        keys = K.thread_keys(self.store.key_base(K.FAMILY, thread_id))
        if registry and not self.cluster:
            keys.append(self.registry)
        return keys

    @staticmethod
    def _run(name: str, keys: list[str], args: list[Any]) -> RedisScript:
        return RedisScript(f"lg:{name}", keys, args)

    def _call(self, name: str, keys: list[str], args: list[Any]) -> Any:
        return self.store.run_script(f"lg:{name}", keys, args)

    def _register(self, thread_id: str, now: float) -> RedisFlow[None]:
        # On a cluster the registry lives in another slot, so it is updated after the write.
        if self.cluster:
            yield RedisCommand("zadd", self.registry, {thread_id: now})

    def execute(self, op: Op[T]) -> T:
        """Run a write operation from a sync caller."""
        return self.store.drive(op())  # type: ignore[no-any-return]

    async def aexecute(self, op: Op[T]) -> T:
        """Run a write operation from async code, on the event loop's async client."""
        return await self.store.adrive(op())  # type: ignore[no-any-return]

    def close(self) -> None:
        """Nothing to stop: the store owns the clients."""

    # -- writes ------------------------------------------------------------------------------
    def put_op(
        self, row: PutRow, now: float, ttl: float | None, writes: Sequence[HeldWrites] = ()
    ) -> Op[bool]:
        """The operation storing one checkpoint and its changed channels (one script).

        `writes` (pending writes the saver held for the parent) are sent before it in the
        same pipeline: one round trip.
        """
        before = [
            (self._keys(w.thread_id, registry=True), self._writes_args(w.thread_id, w.cns,
             w.checkpoint_id, w.rows, w.now, ttl))
            for w in writes
        ]  # fmt: skip
        cj = (
            f'{{"p":{json.dumps(row.parent_id)},"v":{json.dumps(row.versions)},'
            f'"r":{json.dumps(row.run_id)},"m":{row.md_text or "null"}}}'
        )
        rec = (
            cj.encode()
            + b"\0"
            + ormsgpack.packb([row.cp_type, row.checkpoint, row.md_type, row.md_blob])
        )
        head = [now, row.cns, row.checkpoint_id, rec, row.ts, _ttl_ms(ttl), row.parent_id or "",
                row.thread_id]  # fmt: skip
        keys = self._keys(row.thread_id, registry=True)

        def op() -> RedisFlow[bool]:
            blobs, pre = list(row.blobs), before
            for _ in range(3):
                args: list[Any] = list(head)
                for b in blobs:
                    base = b.base if b.kind == "d" and b.base else ""
                    args += [b.channel, b.version, base, _blob_record(b)]
                put = self._run("PUT", keys, args)
                if pre:  # the held writes first, in the same pipeline
                    calls = [*(self._run("PUT_WRITES", k, a) for k, a in pre), put]
                    res = (yield RedisPipeline(calls))[-1]
                else:
                    res = yield put
                pre = []  # stored: a retry sends the checkpoint alone
                if not isinstance(res, list):
                    if res:
                        yield from self._register(row.thread_id, now)
                    return bool(res)
                for i in res[1:]:  # a delta's base is gone: store that value whole
                    b = blobs[int(i)]
                    blobs[int(i)] = BlobRow(
                        b.channel, b.version, "f", None, 0, b.type, b.full or b""
                    )
            raise RuntimeError("delta bases kept disappearing")  # pragma: no cover

        return op

    def put_writes_op(
        self,
        thread_id: str,
        cns: str,
        cid: str,
        rows: Sequence[WriteRow],
        now: float,
        ttl: float | None,
    ) -> Op[bool]:
        """The operation storing the pending writes of one task (one script)."""
        args = self._writes_args(thread_id, cns, cid, rows, now, ttl)
        keys = self._keys(thread_id, registry=True)

        def op() -> RedisFlow[bool]:
            ok = bool((yield self._run("PUT_WRITES", keys, args)))
            if ok:
                yield from self._register(thread_id, now)
            return ok

        return op

    @staticmethod
    def _writes_args(
        thread_id: str, cns: str, cid: str, rows: Sequence[WriteRow], now: float, ttl: float | None
    ) -> list[Any]:
        member = f"{cns}\0{cid}"
        args: list[Any] = [now, member, _ttl_ms(ttl), thread_id]
        for w in rows:
            field = f"{member}\0{w.task_path}\0{w.task_id}\0{K.idx_text(w.idx)}"
            rec = f"{w.channel}\0{w.type}\0".encode() + w.value
            args += [field, rec, "1" if w.idx < 0 else "0"]
        return args

    def delete_thread_op(self, thread_id: str, now: float) -> Op[None]:
        """The operation deleting a thread and leaving a tombstone."""

        def op() -> RedisFlow[None]:
            args = [now, max(int(self.tombstone_ttl), 1), thread_id]
            yield self._run("DELETE", self._keys(thread_id, registry=True), args)
            if self.cluster:
                yield RedisCommand("zrem", self.registry, thread_id)

        return op

    def copy_thread_op(self, src: str, dst: str, now: float, ttl: float | None) -> Op[None]:
        """The operation copying every checkpoint, value and write of `src` to `dst`."""

        def op() -> RedisFlow[None]:
            skeys = self._keys(src)
            parts = [skeys[K.DATA_PARTS.index(part)] for part in ("cp", "bl", "wr")]
            hashes = yield RedisPipeline([RedisCommand("hgetall", k) for k in parts])
            args: list[Any] = [now, _ttl_ms(ttl), dst]
            for h in hashes:
                args.append(len(h))
                for k, v in h.items():
                    args += [k, v]
            yield self._run("RESTORE", self._keys(dst, registry=True), args)
            yield from self._register(dst, now)

        return op

    def _remove(
        self, thread_id: str, *, keep_last: int | None = None, run_ids: set[str] | None = None
    ) -> RedisFlow[int]:
        keys = self._keys(thread_id)
        res = yield self._run("HEADS", keys, [])
        n = int(res[0])
        cps = []
        for j in range(1, 2 * n + 1, 2):
            cns, cid = _s(res[j]).split("\0", 1)
            info = json.loads(res[j + 1])
            cps.append(CheckpointInfo(cns, cid, info["p"], info["v"], info["r"]))
        blobs: dict[tuple[str, str, str], tuple[str, str | None]] = {}
        for j in range(2 * n + 1, len(res), 2):
            cns, ch, ver = _s(res[j]).split("\0", 2)
            text = _s(res[j + 1])
            blobs[(cns, ch, ver)] = (text[:1], text[1:] or None)
        doomed = None
        if run_ids is not None:
            doomed = {(c.cns, c.checkpoint_id) for c in cps if c.run_id in run_ids}
            if not doomed:
                return 0
        drop_cps, drop_blobs = plan_removal(cps, blobs, keep_last=keep_last, doomed=doomed)
        if drop_cps or drop_blobs:
            args: list[Any] = [len(drop_cps), *(f"{c}\0{i}" for c, i in drop_cps)]
            args += [f"{c}\0{ch}\0{v}" for c, ch, v in drop_blobs]
            yield self._run("REMOVE", keys, args)
        return len(drop_cps)

    def prune_op(self, thread_ids: Sequence[str], keep_last: int) -> Op[int]:
        """The operation keeping the newest `keep_last` checkpoints per namespace."""

        def op() -> RedisFlow[int]:
            n = 0
            for t in thread_ids:
                n += yield from self._remove(t, keep_last=keep_last)
            return n

        return op

    def delete_for_runs_op(self, run_ids: Sequence[str]) -> Op[int]:
        """The operation deleting the checkpoints written by `run_ids`."""
        wanted = set(run_ids)

        def op() -> RedisFlow[int]:
            n = 0
            for t in (yield from self._thread_ids()):
                n += yield from self._remove(t, run_ids=wanted)
            return n

        return op

    def purge_expired_op(self, now: float) -> Op[int]:
        """Redis expires threads itself; this drops their registry entries."""

        def op() -> RedisFlow[int]:
            ids = yield from self._thread_ids(live_only=False)
            alive = yield from self._alive(ids)
            gone = [t for t, a in zip(ids, alive, strict=True) if not a]
            if gone:
                yield RedisCommand("zrem", self.registry, *gone)
            return len(gone)

        return op

    # -- reads -------------------------------------------------------------------------------
    def _alive(self, ids: list[str]) -> RedisFlow[list[bool]]:
        if not ids:
            return []
        res = yield RedisPipeline([RedisCommand("exists", self._keys(t)[_TH]) for t in ids])
        return [bool(x) for x in res]

    def _thread_ids(self, *, live_only: bool = True) -> RedisFlow[list[str]]:
        ids = [_s(t) for t in (yield RedisCommand("zrange", self.registry, 0, -1))]
        if live_only and ids:
            alive = yield from self._alive(ids)
            ids = [t for t, a in zip(ids, alive, strict=True) if a]
        return ids

    def thread_ids(self, *, live_only: bool = True) -> list[str]:
        """Every thread of the namespace."""
        return self.store.drive(self._thread_ids(live_only=live_only))  # type: ignore[no-any-return]

    def list_threads(self, limit: int, now: float) -> list[tuple[str, float, float, float | None]]:
        """`(thread_id, created_at, updated_at, expires_at)`, most recently updated first."""

        def flow() -> RedisFlow[tuple[list[str], list[Any]]]:
            ids = [_s(t) for t in (yield RedisCommand("zrevrange", self.registry, 0, -1))]
            if not ids:
                return ids, []
            infos = yield RedisPipeline([RedisCommand("hgetall", self._keys(t)[_TH]) for t in ids])
            return ids, infos

        ids, infos = self.store.drive(flow())
        out = []
        for t, info in zip(ids, infos, strict=True):
            if not info:
                continue
            updated = float(info.get(b"updated_at", 0))
            ttl_ms = info.get(b"ttl_ms")
            expires = updated + int(ttl_ms) / 1000 if ttl_ms and int(ttl_ms) > 0 else None
            out.append((t, float(info.get(b"created_at", updated)), updated, expires))
        return out[:limit]

    def query(self, **kwargs: Any) -> Iterator[RawTuple]:
        """Checkpoints newest first, complete with channel values and pending writes."""
        return iter(self.store.drive(self._query(**kwargs)))

    async def aquery(self, **kwargs: Any) -> list[RawTuple]:
        """Async twin of `query` (on the event loop's async client)."""
        return await self.store.adrive(self._query(**kwargs))  # type: ignore[no-any-return]

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
    ) -> RedisFlow[list[RawTuple]]:
        if thread_id is not None:
            threads = [thread_id]
        else:
            threads = yield from self._thread_ids()
        filt = json.dumps([[k, v] for k, v in pushdown]) if pushdown else ""
        left = limit
        out: list[RawTuple] = []
        for tid in threads:
            cursor = before
            while left is None or left > 0:
                page = _PAGE if left is None else min(left, _PAGE)
                if cns is None or checkpoint_id is not None:
                    page = 0 if left is None else left  # one call: no paging across namespaces
                args = [cns or "", "1" if cns is None else "0", checkpoint_id or "", cursor or ""]
                res = yield self._run("QUERY", self._keys(tid)[:_READ], [*args, page, filt])
                out += [self._raw(tid, item) for item in res]
                if left is not None:
                    left -= len(res)
                if page == 0 or len(res) < page or cns is None or checkpoint_id is not None:
                    break
                cursor = _s(res[-1][0]).split("\0", 1)[1]
            if left is not None and left <= 0:
                break
        return out

    def _raw(self, thread_id: str, item: list[Any]) -> RawTuple:
        member, rec, blobs, writes = item
        cns, cid = _s(member).split("\0", 1)
        cj, _, cp_rec = rec.partition(b"\0")
        cp_type, cp, md_type, md_blob = ormsgpack.unpackb(cp_rec)
        info = json.loads(cj)
        values: dict[str, tuple[str, bytes]] = {}
        i = 0
        while i < len(blobs):
            ch, n = _s(blobs[i]), int(blobs[i + 1])
            typed = assemble_blob([_parse_blob(r) for r in blobs[i + 2 : i + 2 + n]])
            if typed is not None:
                values[ch] = typed
            i += 2 + n
        md = info["m"]
        return RawTuple(
            thread_id, cns, cid, info["p"], cp_type, cp, info["v"],
            None if md is None else json.dumps(md), md_type, md_blob, values,
            [_parse_write(writes[j], writes[j + 1]) for j in range(0, len(writes), 2)],
        )  # fmt: skip

    def blob_values(
        self, thread_id: str, cns: str, pairs: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], tuple[str, bytes] | None]:
        """Stored values of `(channel, version)` pairs; None marks an empty one, absent: no row."""
        if not pairs:
            return {}
        args: list[Any] = [cns, *(x for p in pairs for x in p)]
        res = self._call("BLOBS", self._keys(thread_id)[:_READ], args)
        out: dict[tuple[str, str], tuple[str, bytes] | None] = {}
        i = 0
        for pair in pairs:
            n = int(res[i])
            if n:
                out[pair] = assemble_blob([_parse_blob(r) for r in res[i + 1 : i + 1 + n]])
            i += 1 + n
        return out

    def parent_chain(
        self, thread_id: str, cns: str, checkpoint_id: str
    ) -> list[tuple[str, str | None, dict[str, str]]]:
        """`(id, parent_id, versions)` from the checkpoint up to the root."""
        res = self._call("CHAIN", self._keys(thread_id)[:_READ], [f"{cns}\0{checkpoint_id}"])
        out = []
        for j in range(0, len(res), 2):
            info = json.loads(res[j + 1])
            out.append((_s(res[j]).split("\0", 1)[1], info["p"], info["v"]))
        return out

    def writes_for(
        self, thread_id: str, cns: str, cids: Sequence[str]
    ) -> dict[str, list[tuple[str, str, str, bytes]]]:
        """Pending writes of several checkpoints, each list in `writes_sort_key` order."""
        if not cids:
            return {}
        res = self._call("WRITES", self._keys(thread_id)[:_READ], [f"{cns}\0{c}" for c in cids])
        out: dict[str, list[tuple[str, str, str, bytes]]] = {}
        for j in range(0, len(res), 2):
            cid = res[j].split(b"\0")[1].decode()
            out.setdefault(cid, []).append(_parse_write(res[j], res[j + 1]))
        return out


def _ttl_ms(ttl: float | None) -> str:
    return "" if ttl is None else str(max(int(ttl * 1000), 1))
