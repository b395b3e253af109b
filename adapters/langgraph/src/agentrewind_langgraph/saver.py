"""`RewindSaver`: a LangGraph checkpointer on agentrewind's SQLite, Redis and Postgres stores.

The sync API and the store handling live in `_core.SaverCore`; this module adds the async
twins, which build the same backend operations and run them without blocking the loop: on a
backend with a native async transport (`aexecute`, `aquery`: Redis, PostgreSQL) on the event
loop itself, else on the backend's writer thread and a small pool of reader threads.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, Self, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)

from ._copy import probe_args, refuse_sealed, sealed
from ._core import SaverCore
from ._lease import aclaim_for_delete, lease_name
from ._rows import query_args
from ._threads import next_nodes

__all__ = ["RewindSaver"]

P = ParamSpec("P")
T = TypeVar("T")


class RewindSaver(SaverCore):
    """A drop-in LangGraph checkpointer: one class, sync and async, SQLite, Redis or PostgreSQL.

    Stores one row per checkpoint (without values), one value per (channel, version) for the
    channels in `new_versions` only, and a growing list channel as its new items only.

    Args:
        store_or_url: An open agentrewind store or a URL (`sqlite:///file.db`,
            `redis://host:6379/0`, `rediss://...`, `postgresql://user@host/db`; Redis Cluster
            is detected). A plain file
            path means SQLite. Default: `$AGENTREWIND_STORE`, else the SQLite default.
            On PostgreSQL the async API runs natively on a `psycopg_pool.AsyncConnectionPool`
            per event loop (no thread; `aclose()` closes it). Your own pool: pass the
            `AsyncConnectionPool` itself (its `conninfo` a URL; left open), or a
            `PostgresStore(url, async_pool=...)` / `(url, async_connection=...)`.
        serde: LangGraph serializer. Default: LangGraph's `JsonPlusSerializer` reviving only
            LangGraph's safe types (messages, `Send`, datetimes, ...); a stored value naming
            any other type raises `UnsafeCheckpointError` and nothing is imported or run.
        allowed_msgpack_modules: More `(module, name)` pairs or classes the default serde may
            revive, such as the pydantic models or dataclasses your graph state holds.
        encryption: An `agentrewind.serde.encryption.Encryption`: checkpoints, channel values,
            pending writes and metadata are stored AES-GCM encrypted (metadata filters then
            run in Python). None uses `$AGENTREWIND_ENCRYPTION_KEY` when set; False: never.
        ttl: Seconds a thread lives after its last write (refreshed by every write); None:
            forever.
        namespace: Store namespace when a URL is given.
        tombstone_ttl: Seconds a deleted thread refuses late writes of its old history.
        lease: One saver writes a thread at a time (off by default, as LangGraph's own savers
            do not lock threads). The first write of a thread takes its lease in the store;
            a background thread renews it and `close()` frees it. Another saver writing the
            same thread meanwhile gets `RunLockedError`; a saver whose lease lapsed (its
            process was paused or cut off longer than `lease_ttl`) gets `LeaseLostError` and
            writes nothing, until its graph's next invocation takes the lease again. With
            `durability="sync"` a refused write stops the graph before its next node; with
            LangGraph's default `"async"` durability the error surfaces when LangGraph
            collects the failed write (nothing of the refused owner is stored either way).
        lease_ttl: Seconds a thread's lease lasts without renewal. A crashed process on this
            host frees it at once; one on another host after `lease_ttl`.
        defer_writes: One write per superstep (default True). Inside a graph run, a task's
            pending writes are held in memory and stored in the same transaction (Redis:
            pipeline) as the superstep's `put`. Written at once instead: special writes
            (errors, interrupts, resumes), every write of a superstep where a second task
            writes (with what the first left held, so a finished parallel branch survives a
            failing sibling), writes for a checkpoint already superseded, and anything outside
            a run or under `durability="exit"`. Reads, lists, copies, prunes and `close()`
            store held writes first, and a timer thread stores any write held 0.1 s (a number
            instead of True sets that bound in seconds). Crash window: a process killed
            outright while a task's writes are held loses them, and that task runs again on
            resume. False stores every `put_writes` at once.

    Example:
        >>> with RewindSaver.from_conn_string("sqlite:///runs.db") as saver:  # doctest: +SKIP
        ...     graph = builder.compile(checkpointer=saver)
    """

    _readers: ThreadPoolExecutor | None = None
    _readers_lock = threading.Lock()

    async def _read(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a blocking read on a reader thread (each has its own connection)."""
        if self._readers is None:
            with self._readers_lock:
                if self._readers is None:
                    self._readers = ThreadPoolExecutor(4, thread_name_prefix="agentrewind-lg")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, functools.partial(fn, *args, **kwargs))

    # -- lifecycle ---------------------------------------------------------------------------
    async def asetup(self) -> None:
        """Async twin of `setup`."""
        await self._read(self.setup)

    def close(self) -> None:
        """Stop worker threads and close the store if this saver opened it."""
        readers, self._readers = self._readers, None
        if readers is not None:
            readers.shutdown(wait=False)
        super().close()

    async def aclose(self) -> None:
        """Async twin of `close` (also closes this loop's async connections of the store)."""
        await self._aflush()
        if self._writers is not None:
            await self._writers.aclose()
        if self._owns_store or self._owns_inner:
            closing = getattr(self.store, "aclose_async", None)
            if closing is not None:
                await closing()
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _aquery(self, config: RunnableConfig | None, **kw: Any) -> list[CheckpointTuple]:
        """`list(self._query(config, **kw))`, fetched on the loop when the backend can."""
        aquery = getattr(self.backend, "aquery", None)
        if aquery is None:
            return await self._read(lambda: list(self._query(config, **kw)))
        conf = (config or {}).get("configurable", {})
        await self._aflush(str(conf["thread_id"]) if "thread_id" in conf else None)
        args = query_args(config, kw.get("filter"), kw.get("before"), kw.get("limit"),
                          kw.get("latest", False))  # fmt: skip
        return list(self._query(config, **kw, raws=await aquery(**args)))

    # -- the async API -----------------------------------------------------------------------
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async twin of `get_tuple` (on a reader thread with its own connection, or the loop)."""
        if getattr(self.backend, "aquery", None) is None:
            return await self._read(self.get_tuple, config)
        if self._leases is not None:
            self._leases.reset(str(config["configurable"]["thread_id"]))
        found = await self._aquery(config, limit=1, latest=True)
        return found[0] if found else None

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async twin of `list`."""
        for item in await self._aquery(config, filter=filter, before=before, limit=limit):
            yield item

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Async twin of `get_delta_channel_history`."""
        return await self._read(
            functools.partial(self.get_delta_channel_history, config=config, channels=channels)
        )

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async twin of `put` (committed by the writer thread, grouped with other writes)."""
        row, before, op = self._put_op(config, checkpoint, metadata, new_versions, mark=False)
        for held in before:
            self._writes_stored(await self.backend.aexecute(self._held_op(held)), held.thread_id)
        stored = self._stored(row, await self.backend.aexecute(op))
        if self._writers is not None:  # a task on the loop writes it: no thread is started
            self._writers.amark(row.thread_id, finished=not row.cns and not next_nodes(checkpoint))
        return stored

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Async twin of `put_writes`."""
        for op in self._put_writes_ops(config, writes, task_id, task_path):
            self._writes_stored(
                await self.backend.aexecute(op), str(config["configurable"]["thread_id"])
            )

    async def _aflush(self, thread_id: str | None = None) -> None:
        """Async twin of `_flush`."""
        if self._buffer is not None:
            for w in self._buffer.take(thread_id):
                self._writes_stored(await self.backend.aexecute(self._held_op(w)), w.thread_id)

    async def adelete_thread(self, thread_id: str, *, force: bool = False) -> None:
        """Async twin of `delete_thread`."""
        thread_id, owner = str(thread_id), self._delete_owner()
        try:
            await aclaim_for_delete(self.store, thread_id, owner, force)
            await self.backend.aexecute(self._delete_thread_op(thread_id))
        finally:
            await self.store.arelease_lease(lease_name(thread_id), owner)
            self._deleted(thread_id, owner)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async twin of `delete_for_runs`."""
        if run_ids:
            await self._aflush()
            await self.backend.aexecute(self._delete_for_runs_op(run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async twin of `copy_thread`."""
        await self._aflush(str(source_thread_id))
        if sealed(self):  # (reads every value through the serde: done on the sync side)
            await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)
            return
        src = str(source_thread_id)
        aquery = getattr(self.backend, "aquery", None)
        if aquery is None:
            raws = await self._read(lambda: self.backend.query(**probe_args(src)))
        else:
            raws = await aquery(**probe_args(src))
        refuse_sealed(src, raws)
        await self.backend.aexecute(self._copy_thread_op(source_thread_id, target_thread_id))

    async def aprune(
        self,
        thread_ids: Sequence[str] | None = None,
        *,
        strategy: str = "keep_latest",
        keep_last: int | None = None,
    ) -> None:
        """Async twin of `prune`."""
        await self._aflush()
        athread_ids = getattr(self.backend, "athread_ids", None)
        if thread_ids is None and athread_ids is not None:
            thread_ids = await athread_ids()
        if thread_ids is None:
            args = await self._read(self._prune_args, thread_ids, strategy, keep_last)
        else:  # no I/O
            args = self._prune_args(thread_ids, strategy, keep_last)
        owner, claimed = self._delete_owner(), []
        try:
            for t in args[0] if args[1] == "delete" else ():  # as in `prune`
                await aclaim_for_delete(self.store, t, owner, False)
                claimed.append(t)
            for op in self._prune_ops(*args):
                await self.backend.aexecute(op)
        finally:
            for t in claimed:
                await self.store.arelease_lease(lease_name(t), owner)
                self._deleted(t, owner)
            self._deleted("", owner)
