"""PostgreSQL backend of `RewindSaver`: `lg_` tables in the store's schema.

Each write is one statement (see `sql`): one round trip, one transaction, no lock held
in this process, so a pool's connections write in parallel. A write (and a query, see
`reads`) is a `PostgresFlow`: a generator of transactions that the store runs on its sync
pool (`execute`) or on the running loop's `AsyncConnectionPool` (`aexecute`: no thread), so
sync and async share one code path. The maintenance operations that hold rows locked across
several statements (prune, delete for runs, purge) are flows run as one transaction
(`InTransaction`), sync or async alike.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from agentrewind.adapters import PostgresBytesArray as Bytes
from agentrewind.adapters import PostgresFlow, PostgresTxn, SchemaVersionError
from agentrewind.adapters import PostgresIntArray as Ints
from agentrewind.adapters import PostgresTextArray as Texts

from .._codec import BlobRow, CheckpointInfo, PutRow, WriteRow, plan_removal
from .._defer import HeldWrites
from . import sql as Q
from .reads import PostgresReads

__all__ = ["InTransaction", "PostgresBackend"]

T = TypeVar("T")


@dataclass(frozen=True)
class InTransaction(Generic[T]):
    """An operation whose flow runs as one transaction (its `FOR UPDATE` locks held)."""

    make: Callable[[], PostgresFlow[T]]


Op = Callable[[], PostgresFlow[T]] | InTransaction[T]
"""A write operation: a flow (made by calling it), each of its `PostgresTxn`s a transaction,
or an `InTransaction`."""
_TOUCH_EVERY = 1.0
"""Without a TTL, a thread's `updated_at` is refreshed at most this often (seconds) by one
process: each refresh leaves a dead row version behind."""


class PostgresBackend(PostgresReads):
    """The `lg_` tables of one PostgreSQL store namespace."""

    def __init__(self, store: Any, *, tombstone_ttl: float) -> None:
        self.store = store
        self.db = store.db
        self.ns: str = store.namespace
        self.tombstone_ttl = tombstone_ttl
        self._sql: dict[str, Any] = {}
        self._touched: dict[str, float] = {}
        self._known_runs: set[tuple[str, str]] = set()
        self._writing: set[asyncio.Task[Any]] = set()
        self.migrate()

    def sql(self, name: str) -> Any:
        """Statement `name` of `sql` for the store's schema."""
        text = self._sql.get(name)
        if text is None:
            text = self._sql[name] = self.store.render(getattr(Q, name))
        return text

    # -- schema and plumbing -----------------------------------------------------------------
    def migrate(self) -> None:
        """Create or upgrade the `lg_` tables in one transaction; refuse a newer layout."""

        def too_new(current: int) -> SchemaVersionError:
            return SchemaVersionError(
                f"PostgreSQL at {self.store.url} (schema {self.store.schema!r}): LangGraph "
                f"tables have schema version {current}; this agentrewind-langgraph knows up "
                f"to {Q.SCHEMA_VERSION}: upgrade it"
            )

        migrations = [self.store.render(m) for m in Q.MIGRATIONS]
        table = self.store.render("{s}.lg_schema_version")
        self.db.migrate(table, migrations, Q.SCHEMA_VERSION, too_new)
        rls = Q.NAMESPACE_SETTING in self.db.settings
        if self.db.row_security(self.store.schema, Q.RLS_TABLES, enable=rls):
            self.db.settings[Q.NAMESPACE_SETTING] = self.ns

    def execute(self, op: Op[T]) -> T:
        """Run a write operation from a sync caller (a dropped connection is retried once)."""
        if isinstance(op, InTransaction):
            return self.store.drive_in_transaction(op.make)  # type: ignore[no-any-return]
        return self.store.drive(op())  # type: ignore[no-any-return]

    async def aexecute(self, op: Op[T]) -> T:
        """Run a write operation from async code, on the running loop's async pool.

        The write runs in a task of its own that a cancelled caller does not cancel (a stream
        closed early cancels the graph's pending work): it commits, as it would on the
        thread-backed stores, instead of being rolled back with the caller. Reads from this
        loop wait for such writes first (`_settled`).
        """
        if isinstance(op, InTransaction):
            work = self.store.adrive_in_transaction(op.make)
        else:
            work = self.store.adrive(op())
        task: asyncio.Task[T] = asyncio.ensure_future(work)
        self._writing.add(task)
        task.add_done_callback(self._written)
        return await asyncio.shield(task)

    def _written(self, task: asyncio.Task[Any]) -> None:
        self._writing.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a caller cancelled meanwhile never will

    async def _settled(self) -> None:
        """Wait for this loop's writes still in flight (their callers may have gone)."""
        loop = asyncio.get_running_loop()
        mine = [t for t in list(self._writing) if t.get_loop() is loop]
        if mine:
            await asyncio.wait(mine)

    def close(self) -> None:
        """Nothing to stop: the store owns the pools."""

    # -- writes ------------------------------------------------------------------------------
    def _known(self, thread_id: str, run_id: str | None, now: float, ttl: float | None) -> bool:
        """True when this process committed the thread's row (and this run's) moments ago.

        Then a write needs neither: without a TTL the thread's `updated_at` is refreshed at
        most every `_TOUCH_EVERY` seconds, and the (run, thread) pair once. A delete, copy or
        purge by this process forgets the thread; one by another process leaves a tombstone,
        which the lean statements check, and then the full statement runs.
        """
        if ttl is not None:
            return False  # every write moves the expiry
        last = self._touched.get(thread_id)
        if last is None or now - last >= _TOUCH_EVERY:
            return False
        return run_id is None or (run_id, thread_id) in self._known_runs

    def _remember(self, thread_id: str, run_id: str | None, now: float) -> None:
        """After a committed write of the thread's row: the thread (and run) are known."""
        if len(self._touched) > 10_000:
            self._touched.clear()
            self._known_runs.clear()
        self._touched[thread_id] = now
        if run_id is not None:
            self._known_runs.add((run_id, thread_id))

    def forget(self, thread_id: str | None = None) -> None:
        """Drop what this process knows of a thread (None: of every thread)."""
        if thread_id is None:
            self._touched.clear()
            self._known_runs.clear()
            return
        self._touched.pop(thread_id, None)
        self._known_runs.difference_update([p for p in self._known_runs if p[1] == thread_id])

    def _args(self, thread_id: str, now: float, ttl: float | None) -> dict[str, Any]:
        return {
            "ns": self.ns,
            "tid": thread_id,
            "now": now,
            "ttl": ttl,
            "touch": True,
            "since": now - self.tombstone_ttl,
        }

    def put_op(
        self, row: PutRow, now: float, ttl: float | None, writes: Sequence[HeldWrites] = ()
    ) -> Op[bool]:
        """The operation storing one checkpoint and its changed channels (one statement).

        `writes` (pending writes the saver held for the parent) go in the same transaction:
        one round trip, one commit. On a thread this process wrote moments ago the statement
        is `PUT_KNOWN` (no thread or run row), or `PUT_KNOWN_WRITES` carrying the writes;
        otherwise, or when that finds a tombstone, `PUT` (also the thread's row, the run's,
        and the tombstone rules), after one `PUT_WRITES` per held write in one pipeline.
        """
        md, md_blob = row.md_text, row.md_blob
        if row.md_text is not None and "\\u0000" in row.md_text:
            md, md_blob = None, row.md_text.encode()  # jsonb cannot hold NUL: keep it aside
        tid, run = row.thread_id, row.run_id
        args = self._args(tid, now, ttl) | {
            "cns": row.cns,
            "cid": row.checkpoint_id,
            "parent": row.parent_id,
            "run": run,
            "cp_type": row.cp_type,
            "cp": row.checkpoint,
            "versions": json.dumps(row.versions),
            "md": md,
            "md_type": row.md_type,
            "md_blob": md_blob,
            "ts": row.ts,
        }

        def op() -> PostgresFlow[bool]:
            blobs = list(row.blobs)
            full = not self._known(tid, run, now, ttl)
            pre: list[tuple[Any, dict[str, Any]]] = []
            carry = not full and bool(writes)  # the usual superstep: one statement for both
            if carry:
                args.update(_joined_args(writes))
            elif writes:
                pre = [
                    (self.sql("PUT_WRITES"), self._writes_args(
                        w.thread_id, w.cns, w.checkpoint_id, w.rows, w.now, ttl
                    ))
                    for w in writes
                ]  # fmt: skip
            for _ in range(4):
                args.update(
                    b_ch=Texts([b.channel for b in blobs]),
                    b_ver=Texts([b.version for b in blobs]),
                    b_kind=Texts([b.kind for b in blobs]),
                    b_base=Texts([b.base for b in blobs]),
                    b_n=Ints([b.n for b in blobs]),
                    b_type=Texts([b.type for b in blobs]),
                    b_val=Bytes([b.value for b in blobs]),
                )
                name = "PUT" if full else "PUT_KNOWN_WRITES" if carry else "PUT_KNOWN"
                put = [*pre, (self.sql(name), args)]
                ok, missing = (yield PostgresTxn(put, len(put) - 1))[0]
                pre, carry = [], False  # the writes are stored: a retry sends the checkpoint alone
                if ok:
                    if full:
                        self._remember(tid, run, now)
                    return True
                if not missing:
                    if full:
                        return False  # a late write of a deleted history
                    self.forget(tid)  # a tombstone: the full statement decides
                    full = True
                    continue
                for i in missing:  # a delta's base is gone: store that value whole
                    b = blobs[int(i) - 1]
                    blobs[int(i) - 1] = BlobRow(
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
        """The operation storing the pending writes of one task (one statement)."""
        args = self._writes_args(thread_id, cns, cid, rows, now, ttl)

        def op() -> PostgresFlow[bool]:
            known = self._known(thread_id, None, now, ttl)
            sql = self.sql("PUT_WRITES_KNOWN" if known else "PUT_WRITES")
            ok = bool((yield PostgresTxn([(sql, args)], 0))[0][0])
            if ok and not known:
                self._remember(thread_id, None, now)
            return ok

        return op

    def _writes_args(
        self,
        thread_id: str,
        cns: str,
        cid: str,
        rows: Sequence[WriteRow],
        now: float,
        ttl: float | None,
    ) -> dict[str, Any]:
        return self._args(thread_id, now, ttl) | {"cns": cns, "cid": cid} | _write_arrays(rows)

    def delete_thread_op(self, thread_id: str, now: float) -> Op[None]:
        """The operation deleting a thread and leaving a tombstone (one transaction)."""
        args = {"ns": self.ns, "tid": thread_id, "now": now}
        statements = [(s, args) for s in self.sql("DELETE_THREAD")]
        statements.append((self.sql("SET_TOMBSTONE"), args))

        def op() -> PostgresFlow[None]:
            self.forget(thread_id)
            yield PostgresTxn(statements)
            self.forget(thread_id)  # and what a put running meanwhile learnt

        return op

    def copy_thread_op(self, src: str, dst: str, now: float, ttl: float | None) -> Op[None]:
        """The operation copying every checkpoint, value and write of `src` to `dst`."""
        args = {"ns": self.ns, "tid": dst, "src": src, "now": now, "ttl": ttl}
        statements = [(s, args) for s in self.sql("DELETE_THREAD")]
        statements += [(s, args) for s in self.sql("COPY_THREAD")]
        statements += [(self.sql("CLEAR_TOMBSTONE"), args), (self.sql("TOUCH_THREAD"), args)]

        def op() -> PostgresFlow[None]:
            yield PostgresTxn(statements)
            self.forget(dst)  # its runs are the source's now

        return op

    def _remove(
        self,
        thread_id: str,
        *,
        keep_last: int | None = None,
        run_ids: set[str] | None = None,
    ) -> PostgresFlow[int]:
        args: dict[str, Any] = {"ns": self.ns, "tid": thread_id}
        cps = [
            CheckpointInfo(cns, cid, parent, json.loads(versions), run_id)
            for cns, cid, parent, versions, run_id in (
                yield PostgresTxn([(self.sql("THREAD_CHECKPOINTS"), args)], 0)
            )
        ]
        blobs = {
            (cns, ch, ver): (kind, base)
            for cns, ch, ver, kind, base in (
                yield PostgresTxn([(self.sql("THREAD_BLOB_KEYS"), args)], 0)
            )
        }
        doomed = None
        if run_ids is not None:
            doomed = {(c.cns, c.checkpoint_id) for c in cps if c.run_id in run_ids}
        drop_cps, drop_blobs = plan_removal(cps, blobs, keep_last=keep_last, doomed=doomed)
        statements: list[tuple[str, Any]] = []
        if drop_cps:
            cp_args = args | {"cns": [c for c, _ in drop_cps], "cids": [i for _, i in drop_cps]}
            statements += [(s, cp_args) for s in self.sql("DELETE_CHECKPOINTS")]
        if drop_blobs:
            b_args = args | {
                "b_cns": [c for c, _, _ in drop_blobs],
                "b_ch": [ch for _, ch, _ in drop_blobs],
                "b_ver": [v for _, _, v in drop_blobs],
            }
            statements.append((self.sql("DELETE_BLOBS"), b_args))
        if statements:
            yield PostgresTxn(statements)
        return len(drop_cps)

    def prune_op(self, thread_ids: Sequence[str], keep_last: int) -> Op[int]:
        """The operation keeping the newest `keep_last` checkpoints per namespace."""

        def op() -> PostgresFlow[int]:
            n = 0
            for t in thread_ids:
                n += yield from self._remove(t, keep_last=keep_last)
            return n

        return InTransaction(op)

    def delete_for_runs_op(self, run_ids: Sequence[str]) -> Op[int]:
        """The operation deleting the checkpoints written by `run_ids`."""

        def op() -> PostgresFlow[int]:
            args = {"ns": self.ns, "runs": list(run_ids)}
            threads = yield PostgresTxn([(self.sql("RUN_THREADS"), args)], 0)
            n = 0
            for (t,) in threads:
                n += yield from self._remove(t, run_ids=set(run_ids))
            return n

        return InTransaction(op)

    def purge_expired_op(self, now: float) -> Op[int]:
        """The operation deleting threads whose TTL ran out, and old tombstones."""

        def op() -> PostgresFlow[int]:
            expired = yield PostgresTxn([(self.sql("EXPIRED_THREADS"), {"now": now})], 0)
            statements = [
                (s, {"ns": ns, "tid": t}) for ns, t in expired for s in self.sql("DELETE_THREAD")
            ]
            since = {"since": now - self.tombstone_ttl}
            yield PostgresTxn([*statements, (self.sql("PURGE_TOMBSTONES"), since)])
            for ns, thread_id in expired:
                if ns == self.ns:
                    self.forget(thread_id)
            return len(expired)

        return InTransaction(op)


def _joined_args(writes: Sequence[HeldWrites]) -> dict[str, Any]:
    """`PUT_KNOWN_WRITES`'s `w_` parameters: the writes held for the put's parent.

    One statement cannot write a row twice: of the writes of one (task, idx) the first is kept,
    or the last for a special write (idx < 0), as separate statements would have left it.
    """
    rows: dict[tuple[str, int], WriteRow] = {}
    for w in writes:
        for r in w.rows:
            if r.idx < 0:
                rows[r.task_id, r.idx] = r
            else:
                rows.setdefault((r.task_id, r.idx), r)
    return {"w_cid": writes[0].checkpoint_id} | _write_arrays(list(rows.values()), "w_")


def _write_arrays(rows: Sequence[WriteRow], prefix: str = "") -> dict[str, Any]:
    """Pending-write rows as the typed array parameters `task`, `idx`... (names `prefix`ed)."""
    return {
        f"{prefix}task": Texts([w.task_id for w in rows]),
        f"{prefix}idx": Ints([w.idx for w in rows]),
        f"{prefix}path": Texts([w.task_path for w in rows]),
        f"{prefix}ch": Texts([w.channel for w in rows]),
        f"{prefix}type": Texts([w.type for w in rows]),
        f"{prefix}val": Bytes([w.value for w in rows]),
    }
