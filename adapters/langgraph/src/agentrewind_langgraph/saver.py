"""`RewindSaver`: a LangGraph checkpointer on agentrewind's SQLite, Redis and Cluster stores."""

from __future__ import annotations

import asyncio
import builtins
import datetime as dt
import functools
import logging
import random
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

import agentrewind
from agentrewind.stores import Store

from ._codec import (
    ListDeltas,
    PutRow,
    RawTuple,
    WriteRow,
    decode_metadata,
    encode_metadata,
    matches,
    split_filter,
    vstr,
)

__all__ = ["RewindSaver"]

P = ParamSpec("P")
T = TypeVar("T")
log = logging.getLogger(__name__)

_MEMORY_FILES: dict[str, str] = {}
_APART = frozenset(("id", "channel_versions", "channel_values"))
_MEMORY_LOCK = threading.Lock()


def _memory_sqlite(store: Store) -> Store:
    """A SQLite file standing in for `memory://NAME` (shared by name within this process)."""
    from agentrewind.stores.sqlite import SQLiteStore

    name = store.url.split("://", 1)[1] or f"anon-{id(store)}"
    with _MEMORY_LOCK:
        path = _MEMORY_FILES.get(name)
        if path is None:
            path = str(Path(tempfile.mkdtemp(prefix="agentrewind-lg-")) / "memory.db")
            _MEMORY_FILES[name] = path
    return SQLiteStore(path, namespace=store.namespace)


def _epoch(ts: str | None) -> float:
    if not ts:
        return time.time()
    try:
        return dt.datetime.fromisoformat(ts).timestamp()
    except ValueError:
        return time.time()


def _config(thread_id: str, cns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": cns,
            "checkpoint_id": checkpoint_id,
        }
    }


class RewindSaver(BaseCheckpointSaver[str]):
    """A drop-in LangGraph checkpointer: one class, sync and async, SQLite or Redis.

    Stores one row per checkpoint (without values), one value per (channel, version) for the
    channels in `new_versions` only, and a growing list channel as its new items only.

    Args:
        store_or_url: An open agentrewind store or a URL (`sqlite:///file.db`,
            `redis://host:6379/0`, `rediss://...`; Redis Cluster is detected). A plain file
            path means SQLite. Default: `$AGENTREWIND_STORE`, else the SQLite default.
        serde: LangGraph serializer (default `JsonPlusSerializer`).
        ttl: Seconds a thread lives after its last write (refreshed by every write); None:
            forever.
        namespace: Store namespace when a URL is given.
        tombstone_ttl: Seconds a deleted thread refuses late writes of its old history.

    Example:
        >>> with RewindSaver.from_conn_string("sqlite:///runs.db") as saver:  # doctest: +SKIP
        ...     graph = builder.compile(checkpointer=saver)
    """

    def __init__(
        self,
        store_or_url: Store | str | None = None,
        *,
        serde: SerializerProtocol | None = None,
        ttl: float | None = None,
        namespace: str | None = None,
        tombstone_ttl: float = 86_400.0,
    ) -> None:
        super().__init__(serde=serde)
        if isinstance(store_or_url, Store):
            store, self._owns_store = store_or_url, False
        else:
            store, self._owns_store = (
                agentrewind.connect(_url(store_or_url), namespace=namespace),
                True,
            )
        self._public_store = store
        if store.scheme == "memory":
            store = _memory_sqlite(store)
            self._owns_inner = True
        else:
            self._owns_inner = False
        self.store = store
        self.ttl = ttl
        self._deltas = ListDeltas()
        self._readers: ThreadPoolExecutor | None = None
        self._readers_lock = threading.Lock()
        self.backend: Any
        if store.scheme == "redis":
            from ._redis import RedisBackend

            self.backend = RedisBackend(store, tombstone_ttl=tombstone_ttl)
        else:
            from ._sqlite import SQLiteBackend

            self.backend = SQLiteBackend(store, tombstone_ttl=tombstone_ttl)

    # -- lifecycle ---------------------------------------------------------------------------
    @classmethod
    def from_conn_string(cls, conn_string: str, **kwargs: Any) -> RewindSaver:
        """Open a saver from a store URL or SQLite file path; use it with `with`/`async with`.

        Args:
            conn_string: `sqlite:///file.db`, `redis://...`, `memory://`, or a file path.
            **kwargs: Passed to `RewindSaver`.

        Returns:
            The saver; leaving the `with` block closes it.
        """
        return cls(_url(conn_string), **kwargs)

    def setup(self) -> None:
        """Create or migrate the saver's tables/keys (also done when the saver opens)."""
        if hasattr(self.backend, "migrate"):
            self.backend.migrate()

    async def asetup(self) -> None:
        """Async twin of `setup`."""
        await self._read(self.setup)

    def close(self) -> None:
        """Stop worker threads and close the store if this saver opened it."""
        self.backend.close()
        if self._readers is not None:
            self._readers.shutdown(wait=False)
            self._readers = None
        if self._owns_inner:
            self.store.close()
        if self._owns_store:
            self._public_store.close()

    async def aclose(self) -> None:
        """Async twin of `close`."""
        self.close()

    def __enter__(self) -> RewindSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> RewindSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    async def _read(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        if self._readers is None:
            with self._readers_lock:
                if self._readers is None:
                    self._readers = ThreadPoolExecutor(4, thread_name_prefix="agentrewind-lg")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, functools.partial(fn, *args, **kwargs))

    # -- conversions -------------------------------------------------------------------------
    def _to_tuple(self, raw: RawTuple) -> CheckpointTuple:
        loads = self.serde.loads_typed
        checkpoint = loads((raw.cp_type, raw.checkpoint))
        checkpoint["id"] = raw.checkpoint_id
        checkpoint["channel_versions"] = dict(raw.versions)
        checkpoint["channel_values"] = {ch: loads(typed) for ch, typed in raw.values.items()}
        return CheckpointTuple(
            config=_config(raw.thread_id, raw.cns, raw.checkpoint_id),
            checkpoint=checkpoint,
            metadata=decode_metadata(self.serde, raw.md_text, raw.md_type, raw.md_blob),
            parent_config=(
                _config(raw.thread_id, raw.cns, raw.parent_id) if raw.parent_id else None
            ),
            pending_writes=[(task, ch, loads((typ, val))) for task, ch, typ, val in raw.writes],
        )

    def _put_row(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> PutRow:
        conf = config["configurable"]
        thread_id, cns = str(conf["thread_id"]), conf.get("checkpoint_ns", "")
        # `id` and `channel_versions` are stored in columns of their own, the values apart.
        c = {k: v for k, v in checkpoint.items() if k not in _APART}
        values: Mapping[str, Any] = checkpoint.get("channel_values") or {}
        cp_type, cp_bytes = self.serde.dumps_typed(c)
        dumps, row = self.serde.dumps_typed, self._deltas.row
        # A channel versioned without a value (cleared, or a DeltaChannel step) gets no row.
        blobs = [
            row(thread_id, cns, ch, vstr(version), dumps(values[ch]))
            for ch, version in new_versions.items()
            if ch in values
        ]
        md = get_checkpoint_metadata(config, metadata)
        md_text, md_type, md_blob = encode_metadata(self.serde, md)
        run_id = md.get("run_id")
        return PutRow(
            thread_id=thread_id,
            cns=cns,
            checkpoint_id=checkpoint["id"],
            parent_id=conf.get("checkpoint_id"),
            run_id=run_id if isinstance(run_id, str) else None,
            cp_type=cp_type,
            checkpoint=cp_bytes,
            versions={ch: vstr(v) for ch, v in checkpoint["channel_versions"].items()},
            md_text=md_text,
            md_type=md_type,
            md_blob=md_blob,
            ts=_epoch(checkpoint.get("ts")),
            blobs=blobs,
        )

    def _write_rows(
        self, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> list[WriteRow]:
        rows = []
        for idx, (channel, value) in enumerate(writes):
            typ, data = self.serde.dumps_typed(value)
            rows.append(
                WriteRow(task_id, WRITES_IDX_MAP.get(channel, idx), task_path, channel, typ, data)
            )
        return rows

    def _query(
        self,
        config: RunnableConfig | None,
        *,
        filter: Mapping[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
        latest: bool = False,
    ) -> Iterator[CheckpointTuple]:
        conf = (config or {}).get("configurable", {})
        pushdown, exact = split_filter(filter)
        cns = conf.get("checkpoint_ns")
        if latest and cns is None:
            cns = ""
        raws = self.backend.query(
            thread_id=str(conf["thread_id"]) if "thread_id" in conf else None,
            cns=cns,
            checkpoint_id=conf.get("checkpoint_id") or None,
            before=get_checkpoint_id(before) if before else None,
            pushdown=pushdown,
            limit=limit if exact else None,
            now=time.time(),
        )
        left = limit
        for raw in raws:
            if left is not None and left <= 0:
                return
            if not exact:
                md = decode_metadata(self.serde, raw.md_text, raw.md_type, raw.md_blob)
                if not matches(md, filter):
                    continue
            if left is not None:
                left -= 1
            yield self._to_tuple(raw)

    # -- the BaseCheckpointSaver API ---------------------------------------------------------
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Return the checkpoint `config` names (its `checkpoint_id`, else the latest).

        Args:
            config: `configurable` with `thread_id`, optional `checkpoint_ns` and `checkpoint_id`.

        Returns:
            The checkpoint with its values, metadata, parent config and pending writes (in
            `writes_sort_key` order), or None.
        """
        return next(self._query(config, limit=1, latest=True), None)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """List checkpoints newest first.

        Args:
            config: Thread (and optionally namespace/checkpoint) to list; None: every thread.
            filter: Metadata equality filter (evaluated by SQLite or a Lua script).
            before: Only checkpoints older than this one.
            limit: At most this many.

        Yields:
            Checkpoint tuples.
        """
        return self._query(config, filter=filter, before=before, limit=limit)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint and the values of the channels in `new_versions`, atomically.

        Args:
            config: Names the thread, namespace and parent checkpoint.
            checkpoint: The checkpoint.
            metadata: Its metadata.
            new_versions: Channels whose value changed since the last stored checkpoint.

        Returns:
            The config of the stored checkpoint.
        """
        row = self._put_row(config, checkpoint, metadata, new_versions)
        self._stored(row, self.backend.execute(self.backend.put_op(row, time.time(), self.ttl)))
        return _config(row.thread_id, row.cns, row.checkpoint_id)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store the pending writes of one task at the checkpoint in `config`, atomically.

        Args:
            config: Names the checkpoint the task ran from.
            writes: `(channel, value)` pairs.
            task_id: The task.
            task_path: The task's path (orders writes with `writes_sort_key`).
        """
        op = self._put_writes_op(config, writes, task_id, task_path)
        self._stored(None, self.backend.execute(op))

    def _put_writes_op(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> Any:
        conf = config["configurable"]
        rows = self._write_rows(writes, task_id, task_path)
        return self.backend.put_writes_op(
            str(conf["thread_id"]),
            conf.get("checkpoint_ns", ""),
            conf["checkpoint_id"],
            rows,
            time.time(),
            self.ttl,
        )

    def _stored(self, row: PutRow | None, accepted: bool) -> None:
        if not accepted:
            if row is not None:
                self._deltas.forget(row.thread_id)
            log.warning("late write to a deleted LangGraph thread ignored")

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint, value and write of a thread (all namespaces).

        Writes that arrive later for the deleted history are ignored (a tombstone), so an
        in-flight run cannot bring the thread back; a new run on the same id starts fresh.
        """
        self._deltas.forget(str(thread_id))
        self.backend.execute(self.backend.delete_thread_op(str(thread_id), time.time()))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose metadata `run_id` is in `run_ids`."""
        if run_ids:
            self._deltas.forget()
            self.backend.execute(self.backend.delete_for_runs_op(list(run_ids)))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread's whole history (every namespace, value and write) to another id."""
        op = self.backend.copy_thread_op(
            str(source_thread_id), str(target_thread_id), time.time(), self.ttl
        )
        self._deltas.forget(str(target_thread_id))
        self.backend.execute(op)

    def prune(
        self,
        thread_ids: Sequence[str] | None = None,
        *,
        strategy: str = "keep_latest",
        keep_last: int | None = None,
    ) -> None:
        """Delete old checkpoints.

        Args:
            thread_ids: Threads to prune; None: every thread of the namespace.
            strategy: `"keep_latest"` keeps the newest `keep_last` (default 1) checkpoints per
                namespace, plus the ancestors a `DeltaChannel` needs to rebuild its value;
                `"delete"` deletes the threads.
            keep_last: How many checkpoints per namespace `"keep_latest"` keeps.

        Raises:
            ValueError: Unknown strategy or a negative `keep_last`.
        """
        ids, keep = self._prune_args(thread_ids, strategy, keep_last)
        if strategy == "delete":
            for t in ids:
                self.delete_thread(t)
        elif ids:
            self._deltas.forget()
            self.backend.execute(self.backend.prune_op(ids, keep))

    def _prune_args(
        self, thread_ids: Sequence[str] | None, strategy: str, keep_last: int | None
    ) -> tuple[builtins.list[str], int]:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'")
        keep = 1 if keep_last is None else keep_last
        if keep < 0:
            raise ValueError(f"keep_last must be >= 0, not {keep_last!r}")
        ids = self.backend.thread_ids() if thread_ids is None else [str(t) for t in thread_ids]
        return ids, keep

    def purge_expired(self) -> int:
        """Delete threads whose TTL ran out (Redis expires them itself); returns how many."""
        return int(self.backend.execute(self.backend.purge_expired_op(time.time())))

    def get_next_version(self, current: str | None, channel: None) -> str:
        """A zero-padded counter plus a random suffix: string-sortable and fork-unique.

        The counter has 10 digits (short keys; versions appear in every checkpoint many
        times); a history that already uses LangGraph's 32-digit form (e.g. migrated from
        SqliteSaver) keeps it, so versions of one thread always compare correctly as text.
        """
        if current is None:
            n, width = 0, 10
        elif isinstance(current, int):
            n, width = current, 10
        else:
            head = str(current).split(".", 1)[0]
            n, width = int(head), max(len(head), 10)
        return f"{n + 1:0{width}}.{random.getrandbits(32):08x}"

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Writes and seed of `DeltaChannel`s along the parent chain, in a few queries."""
        if not channels:
            return {}
        conf = config["configurable"]
        thread_id, cns = str(conf["thread_id"]), conf.get("checkpoint_ns", "")
        cid = conf.get("checkpoint_id")
        if not cid:
            latest = self.get_tuple(config)
            if latest is None:
                return {ch: {"writes": []} for ch in channels}
            cid = latest.config["configurable"]["checkpoint_id"]
        chain = self.backend.parent_chain(thread_id, cns, cid)[1:]
        pairs = list({(ch, vers[ch]) for _, _, vers in chain for ch in channels if ch in vers})
        values = self.backend.blob_values(thread_id, cns, pairs)
        remaining = set(channels)
        seeds: dict[str, Any] = {}
        needed: dict[str, set[str]] = {}
        for ancestor, _, versions in chain:
            if not remaining:
                break
            needed[ancestor] = set(remaining)
            for ch in list(remaining):
                typed = values.get((ch, versions[ch])) if ch in versions else None
                if typed is not None:
                    seeds[ch] = self.serde.loads_typed(typed)
                    remaining.discard(ch)
        writes = self.backend.writes_for(thread_id, cns, list(needed))
        collected: dict[str, list[PendingWrite]] = {ch: [] for ch in channels}
        for ancestor, _, _ in reversed([c for c in chain if c[0] in needed]):
            for task, ch, typ, val in writes.get(ancestor, []):
                if ch in needed[ancestor]:
                    collected[ch].append((task, ch, self.serde.loads_typed((typ, val))))
        out: dict[str, DeltaChannelHistory] = {}
        for ch in channels:
            entry: DeltaChannelHistory = {"writes": collected[ch]}
            if ch in seeds:
                entry["seed"] = seeds[ch]
            out[ch] = entry
        return out

    # -- async twins -------------------------------------------------------------------------
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async twin of `get_tuple` (runs on a reader thread with its own connection)."""
        return await self._read(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async twin of `list`."""
        items = await self._read(
            lambda: list(self._query(config, filter=filter, before=before, limit=limit))
        )
        for item in items:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async twin of `put` (committed by the writer thread, grouped with other writes)."""
        row = self._put_row(config, checkpoint, metadata, new_versions)
        op = self.backend.put_op(row, time.time(), self.ttl)
        self._stored(row, await self.backend.aexecute(op))
        return _config(row.thread_id, row.cns, row.checkpoint_id)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Async twin of `put_writes`."""
        op = self._put_writes_op(config, writes, task_id, task_path)
        self._stored(None, await self.backend.aexecute(op))

    async def adelete_thread(self, thread_id: str) -> None:
        """Async twin of `delete_thread`."""
        self._deltas.forget(str(thread_id))
        await self.backend.aexecute(self.backend.delete_thread_op(str(thread_id), time.time()))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async twin of `delete_for_runs`."""
        if run_ids:
            self._deltas.forget()
            await self.backend.aexecute(self.backend.delete_for_runs_op(list(run_ids)))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async twin of `copy_thread`."""
        op = self.backend.copy_thread_op(
            str(source_thread_id), str(target_thread_id), time.time(), self.ttl
        )
        self._deltas.forget(str(target_thread_id))
        await self.backend.aexecute(op)

    async def aprune(
        self,
        thread_ids: Sequence[str] | None = None,
        *,
        strategy: str = "keep_latest",
        keep_last: int | None = None,
    ) -> None:
        """Async twin of `prune`."""
        ids, keep = await self._read(self._prune_args, thread_ids, strategy, keep_last)
        if strategy == "delete":
            for t in ids:
                await self.adelete_thread(t)
        elif ids:
            self._deltas.forget()
            await self.backend.aexecute(self.backend.prune_op(ids, keep))

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Async twin of `get_delta_channel_history`."""
        return await self._read(
            functools.partial(self.get_delta_channel_history, config=config, channels=channels)
        )


def _url(conn_string: str | None) -> str | None:
    if conn_string is None or "://" in conn_string:
        return conn_string
    if conn_string == ":memory:":
        return "memory://"
    return "sqlite:///" + str(Path(conn_string).expanduser().resolve())
