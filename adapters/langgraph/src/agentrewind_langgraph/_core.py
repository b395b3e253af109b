"""The sync half of `RewindSaver`: opening a store, lifecycle and the sync checkpointer API.

`saver.RewindSaver` adds the async twins; both halves build their backend operations with
the same `_*_op` helpers here, so the two APIs cannot drift apart.
"""

from __future__ import annotations

import builtins
import logging
import time
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Self

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from agentrewind.adapters import Encryption, make_lease_owner, retire_lease_owner

from ._codec import ListDeltas, PutRow, matches, split_filter
from ._defer import HeldWrites, WriteBuffer, may_hold, write_held
from ._lease import ThreadLeases, claim_for_delete, deleted_error, lease_name
from ._maintenance import ThreadMaintenance
from ._open import memory_sqlite, next_version, open_backend, open_store, url_of
from ._rows import (
    collect_history,
    find_seeds,
    put_row,
    query_args,
    raw_metadata,
    thread_config,
    to_tuple,
    write_rows,
)
from ._serde import AesGcmCipher, SafeSerializer, encrypted
from ._threads import next_nodes
from ._writers import WriterMarks

__all__ = ["SaverCore"]

log = logging.getLogger("agentrewind.langgraph")


class SaverCore(ThreadMaintenance, BaseCheckpointSaver[str]):
    """Store handling and the sync API of `RewindSaver` (see its docstring for the arguments)."""

    def __init__(
        self,
        store_or_url: Any = None,
        *,
        serde: SerializerProtocol | None = None,
        ttl: float | None = None,
        namespace: str | None = None,
        tombstone_ttl: float = 86_400.0,
        allowed_msgpack_modules: Iterable[tuple[str, ...] | type] = (),
        encryption: Encryption | bool | None = None,
        lease: bool = False,
        lease_ttl: float = 30.0,
        defer_writes: bool | float = True,
    ) -> None:
        if serde is None:
            serde = SafeSerializer(allowed_msgpack_modules=allowed_msgpack_modules)
        elif allowed_msgpack_modules and isinstance(serde, JsonPlusSerializer):
            serde = serde.with_msgpack_allowlist(allowed_msgpack_modules)
        super().__init__(serde=encrypted(serde, encryption))
        store, self._owns_store = open_store(store_or_url, namespace)
        cipher = getattr(self.serde, "cipher", None)
        if isinstance(cipher, AesGcmCipher):  # ciphertexts are bound to the namespace
            cipher.namespace = store.namespace
        self._public_store = store
        if store.scheme == "memory":
            store = memory_sqlite(store)
            self._owns_inner = True
        else:
            self._owns_inner = False
        self.store = store
        self.ttl = ttl
        self._deltas = ListDeltas()
        self.backend: Any = open_backend(store, tombstone_ttl)
        self._leases = ThreadLeases(store, lease_ttl) if lease else None
        self._writers = None if lease else WriterMarks(store)  # with a lease, the lease marks
        later = weakref.WeakMethod(self._store_held)
        self._buffer = WriteBuffer(defer_writes, later) if defer_writes else None
        self._at_exit = weakref.finalize(self, write_held, self._buffer, self.backend, ttl)

    # -- lifecycle ---------------------------------------------------------------------------
    @classmethod
    def from_conn_string(cls, conn_string: str, **kwargs: Any) -> Self:
        """Open a saver from a store URL or SQLite file path; use it with `with`/`async with`.

        Args:
            conn_string: `sqlite:///file.db`, `redis://...`, `postgresql://...`, `memory://`,
                or a file path.
            **kwargs: Passed to `RewindSaver`.

        Returns:
            The saver; leaving the `with` block closes it.
        """
        return cls(url_of(conn_string), **kwargs)

    def setup(self) -> None:
        """Create or migrate the saver's tables/keys (also done when the saver opens)."""
        if hasattr(self.backend, "migrate"):
            self.backend.migrate()

    def close(self) -> None:
        """Store held writes, stop worker threads and close the store if this saver opened it."""
        try:
            self._flush()
        finally:
            self._at_exit.detach()
            if self._buffer is not None:
                self._buffer.close()
                self._flush()  # what the timer thread left
            self._close()

    def _close(self) -> None:
        if self._leases is not None:
            self._leases.close()
        if self._writers is not None:
            self._writers.close()
        self.backend.close()
        if self._owns_inner:
            self.store.close()
        if self._owns_store:
            self._public_store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reads -------------------------------------------------------------------------------
    def _query(
        self,
        config: RunnableConfig | None,
        *,
        filter: Mapping[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
        latest: bool = False,
        raws: Iterable[Any] | None = None,
    ) -> Iterator[CheckpointTuple]:
        """`list`'s checkpoints; `raws`: the backend's rows fetched already (held writes stored)."""
        _, exact = split_filter(filter)
        if raws is None:
            conf = (config or {}).get("configurable", {})
            self._flush(str(conf["thread_id"]) if "thread_id" in conf else None)
            raws = self.backend.query(**query_args(config, filter, before, limit, latest))
        left = limit
        for raw in raws:
            if left is not None and left <= 0:
                return
            if not exact:
                md = raw_metadata(self.serde, raw)
                if not matches(md, filter):
                    continue
            if left is not None:
                left -= 1
            yield to_tuple(self.serde, raw)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Return the checkpoint `config` names (its `checkpoint_id`, else the latest).

        Args:
            config: `configurable` with `thread_id`, optional `checkpoint_ns` and `checkpoint_id`.

        Returns:
            The checkpoint with its values, metadata, parent config and pending writes (in
            `writes_sort_key` order), or None.
        """
        if self._leases is not None:
            self._leases.reset(str(config["configurable"]["thread_id"]))
        self._flush(str(config["configurable"]["thread_id"]))
        one = getattr(self.backend, "get_one", None)
        if one is None:
            return next(self._query(config, limit=1, latest=True), None)
        conf = config["configurable"]
        raw = one(
            str(conf["thread_id"]),
            conf.get("checkpoint_ns") or "",
            conf.get("checkpoint_id") or None,
            time.time(),
        )
        return None if raw is None else to_tuple(self.serde, raw)

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

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Writes and seed of `DeltaChannel`s along the parent chain, in a few queries."""
        if not channels:
            return {}
        conf = config["configurable"]
        thread_id, cns = str(conf["thread_id"]), conf.get("checkpoint_ns", "")
        self._flush(thread_id)
        cid = conf.get("checkpoint_id")
        if not cid:
            latest = self.get_tuple(config)
            if latest is None:
                return {ch: {"writes": []} for ch in channels}
            cid = latest.config["configurable"]["checkpoint_id"]
        chain = self.backend.parent_chain(thread_id, cns, cid)[1:]
        pairs = list({(ch, vers[ch]) for _, _, vers in chain for ch in channels if ch in vers})
        values = self.backend.blob_values(thread_id, cns, pairs)
        seeds, needed = find_seeds(self.serde, chain, channels, values, (thread_id, cns))
        writes = self.backend.writes_for(thread_id, cns, list(needed))
        return collect_history(self.serde, chain, channels, seeds, needed, writes, (thread_id, cns))

    # -- writes: each builds its backend operation with a `_*_op` helper shared with the
    # async twin, then runs it with `backend.execute` (async: `backend.aexecute`) --------------
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
        row, before, op = self._put_op(config, checkpoint, metadata, new_versions)
        for held in before:
            self._store_held(held)
        return self._stored(row, self.backend.execute(op))

    def _put_op(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        *,
        mark: bool = True,
    ) -> tuple[PutRow, builtins.list[HeldWrites], Any]:
        """The checkpoint's row, held writes to store before it, and its operation.

        The writes held for the parent checkpoint go in the checkpoint's own operation.
        `mark`: note this process as the thread's writer (the sync API: the marks' thread
        writes it; the async API starts no thread and marks nothing).
        """
        row = put_row(self.serde, self._deltas, config, checkpoint, metadata, new_versions)
        before: builtins.list[HeldWrites] = []
        joined: builtins.list[HeldWrites] = []
        if self._buffer is not None:
            before, joined = self._buffer.for_put(
                row.thread_id, row.cns, row.parent_id, row.checkpoint_id
            )
        op = self.backend.put_op(row, time.time(), self.ttl, joined)
        if self._leases is not None:
            self._leases.hold(row.thread_id)
            op = self._leases.fenced(row.thread_id, op)
        elif self._writers is not None and mark:
            self._writers.mark(row.thread_id, finished=not row.cns and not next_nodes(checkpoint))
        return row, before, op

    def _stored(self, row: PutRow, accepted: bool) -> RunnableConfig:
        if not accepted:
            self._deltas.forget(row.thread_id)
            self._writes_stored(accepted, row.thread_id)
        return thread_config(row.thread_id, row.cns, row.checkpoint_id)

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
        for op in self._put_writes_ops(config, writes, task_id, task_path):
            self._writes_stored(self.backend.execute(op), str(config["configurable"]["thread_id"]))

    def _put_writes_ops(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> builtins.list[Any]:
        """The operations to run now: none when the writes are held for the next `put`."""
        conf = config["configurable"]
        rows = write_rows(self.serde, writes, task_id, task_path, config)
        held = HeldWrites(
            str(conf["thread_id"]), conf.get("checkpoint_ns", ""), conf["checkpoint_id"], rows,
            time.time(),
        )  # fmt: skip
        if self._buffer is None:
            return [self._held_op(held)]
        if self._leases is not None:
            self._leases.hold(held.thread_id)  # a lost lease fails here, not at the `put`
        now = self._buffer.offer(held, task_id, may_hold(conf, task_id, task_path, rows))
        return [self._held_op(w) for w in now]

    def _held_op(self, w: HeldWrites) -> Any:
        op = self.backend.put_writes_op(
            w.thread_id, w.cns, w.checkpoint_id, w.rows, w.now, self.ttl
        )
        if self._leases is not None:
            self._leases.hold(w.thread_id)
            op = self._leases.fenced(w.thread_id, op)
        return op

    def _flush(self, thread_id: str | None = None, *, forget: bool = False) -> None:
        """Store the writes held for a thread (None: every thread) before reading it."""
        if self._buffer is not None:
            for w in self._buffer.take(thread_id, forget=forget):
                if not forget:
                    self._store_held(w)

    def _store_held(self, w: HeldWrites) -> None:
        self._writes_stored(self.backend.execute(self._held_op(w)), w.thread_id)

    def _writes_stored(self, accepted: bool, thread_id: str) -> None:
        """A write the tombstone of a deleted thread refused: logged, or (leased) raised."""
        if accepted:
            return
        if self._leases is not None:  # its owner must know: the graph's state is not stored
            raise deleted_error(thread_id)
        log.warning("late write to a deleted LangGraph thread ignored")

    def delete_thread(self, thread_id: str, *, force: bool = False) -> None:
        """Delete every checkpoint, value and write of a thread (all namespaces).

        Writes that arrive later for the deleted history are ignored (a tombstone), so an
        in-flight run cannot bring the thread back; a new run on the same id starts fresh.
        A thread another saver holds the lease of (`lease=True`) is not deleted unless
        `force` (then that saver's next write raises `DataLostError`).

        Raises:
            RunLockedError: Another live saver holds the thread's lease (without `force`).
        """
        thread_id, owner = str(thread_id), self._delete_owner()
        try:
            claim_for_delete(self.store, thread_id, owner, force)
            self.backend.execute(self._delete_thread_op(thread_id))
        finally:
            self.store.release_lease(lease_name(thread_id), owner)
            self._deleted(thread_id, owner)

    def _delete_owner(self) -> str:
        """The lease owner a delete holds the thread's lease under."""
        return self._leases.owner if self._leases is not None else make_lease_owner()

    def _deleted(self, thread_id: str, owner: str) -> None:
        if self._leases is not None:
            if thread_id:
                self._leases.deleted(thread_id)
        else:
            retire_lease_owner(owner)

    def _delete_thread_op(self, thread_id: str) -> Any:
        self._flush(str(thread_id), forget=True)  # held writes of a deleted thread: dropped
        self._deltas.forget(str(thread_id))
        return self.backend.delete_thread_op(str(thread_id), time.time())

    def get_next_version(self, current: str | None, channel: None) -> str:
        """A zero-padded counter plus a random suffix: string-sortable and fork-unique.

        The counter has 10 digits (short keys; versions appear in every checkpoint many
        times); a history that already uses LangGraph's 32-digit form (e.g. migrated from
        SqliteSaver) keeps it, so versions of one thread always compare correctly as text.
        """
        return next_version(current)
