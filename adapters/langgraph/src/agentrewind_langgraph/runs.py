"""LangGraph threads and their checkpoints as runs and steps for every CLI command.

Light on purpose: this module imports no framework. `present` looks for the saver's tables
(SQLite) or thread registry (Redis) first; LangGraph is imported only when a store holds
threads, so `agentrewind runs` on a store without them stays fast.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from agentrewind.adapters import RunInfo, RunMetrics, StepRecord, Store

from ._threads import (
    errors_of,
    interrupts_of,
    is_internal,
    jsonable,
    next_nodes,
    thread_status,
    timestamp,
    visible,
    writer_nodes,
)
from ._writers import thread_writer
from .redis import keys as K

__all__ = ["LangGraphRuns", "run_source"]


@contextmanager
def _saver(store: Store) -> Iterator[Any]:
    from .saver import RewindSaver

    saver = RewindSaver(store)
    try:
        yield saver
    finally:
        saver.close()


def _conf(thread: str, ns: str = "", checkpoint_id: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


class LangGraphRuns:
    """A `RunSource`: LangGraph threads as runs, their checkpoints as steps."""

    name = "langgraph"

    def present(self, store: Store) -> bool:
        """Whether the store holds LangGraph threads in its namespace (imports nothing)."""
        if store.scheme == "sqlite":
            with store.db.read() as conn:  # type: ignore[attr-defined]
                if not conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'lg_threads'"
                ).fetchone():
                    return False
                row = conn.execute(
                    "SELECT 1 FROM lg_threads WHERE ns = ? LIMIT 1", (store.namespace,)
                ).fetchone()
            return row is not None
        if store.scheme == "redis":
            key = store.namespace_key(K.REGISTRY)  # type: ignore[attr-defined]
            with store.translate_errors():  # type: ignore[attr-defined]
                return bool(store.client.exists(key))  # type: ignore[attr-defined]
        if store.scheme == "postgresql":
            db: Any = store.db  # type: ignore[attr-defined]
            schema = store.schema  # type: ignore[attr-defined]
            if not db.fetchone(
                "SELECT 1 FROM information_schema.tables WHERE table_schema = %s "
                "AND table_name = 'lg_threads'",
                (schema,),
            ):
                return False
            q = store._q  # type: ignore[attr-defined]
            return bool(
                db.fetchone(
                    f"SELECT 1 FROM {q}.lg_threads WHERE ns = %s LIMIT 1", (store.namespace,)
                )
            )
        return True

    def _counts(self, store: Store, threads: list[str]) -> dict[str, int]:
        if not threads:
            return {}
        if store.scheme == "sqlite":
            marks = ",".join("?" * len(threads))
            with store.db.read() as conn:  # type: ignore[attr-defined]
                rows = conn.execute(
                    f"SELECT thread_id, count(*) FROM lg_checkpoints WHERE ns = ? AND "
                    f"thread_id IN ({marks}) GROUP BY thread_id",
                    (store.namespace, *threads),
                ).fetchall()
            return {str(t): int(n) for t, n in rows}
        if store.scheme == "postgresql":
            q = store._q  # type: ignore[attr-defined]
            rows = store.db.fetchall(  # type: ignore[attr-defined]
                f"SELECT thread_id, count(*) FROM {q}.lg_checkpoints WHERE ns = %s AND "
                "thread_id = ANY(%s) GROUP BY thread_id",
                (store.namespace, threads),
            )
            return {str(t): int(n) for t, n in rows}
        if store.scheme == "redis":
            base = store.key_base  # type: ignore[attr-defined]
            with store.translate_errors():  # type: ignore[attr-defined]
                pipe = store.client.pipeline(transaction=False)  # type: ignore[attr-defined]
                for t in threads:
                    pipe.hlen(K.thread_keys(base(K.FAMILY, t))[0])
                return {t: int(n) for t, n in zip(threads, pipe.execute(), strict=True)}
        return {t: len(self.load_steps(store, t) or []) for t in threads}

    def _info(self, saver: Any, row: tuple[str, float, float, float | None], n: int) -> RunInfo:
        thread, created, updated, expires = row
        latest = saver.get_tuple(_conf(thread))
        writes = latest.pending_writes or [] if latest is not None else []
        status = thread_status(latest, lambda: thread_writer(saver.store, thread))
        meta: dict[str, Any] = {"source": "langgraph"}
        if latest is not None:
            meta["next"] = next_nodes(latest.checkpoint)
            if found := interrupts_of(writes):
                meta["interrupts"] = found
        if errors := errors_of(writes):
            meta["error"] = {"type": type(errors[0]).__name__, "message": str(errors[0])[:2000]}
        return RunInfo(thread, status, created, updated, expires, RunMetrics(steps=n), meta)

    def list_runs(self, store: Store, *, limit: int) -> list[RunInfo]:
        """Threads of the store's namespace, most recently updated first.

        Each carries its checkpoint count (`metrics.steps`) and status: `paused` at an
        `interrupt()` (its payloads in `meta["interrupts"]`) or a static interrupt, `failed`
        when a node raised (its error in `meta["error"]`), `crashed` when the process writing
        it died mid-run, `running` while it writes, else `completed` (see `_writers`).
        """
        if not self.present(store):
            return []
        with _saver(store) as saver:
            rows = saver.backend.list_threads(limit, time.time())
            counts = self._counts(store, [r[0] for r in rows])
            return [self._info(saver, r, counts.get(r[0], 0)) for r in rows]

    def get_run(self, store: Store, run_id: str) -> RunInfo | None:
        """One thread as a run, or None."""
        if not self.present(store):
            return None
        with _saver(store) as saver:
            for row in saver.backend.list_threads(1_000_000, time.time()):
                if row[0] == run_id:
                    return self._info(saver, row, self._counts(store, [run_id]).get(run_id, 0))
        return None

    def load_steps(self, store: Store, run_id: str) -> list[StepRecord] | None:
        """Every checkpoint of a thread (all namespaces), oldest first, linked by `parent_id`.

        Each is named after the nodes whose superstep wrote it (`meta["node"]`), with the
        nodes due next (`meta["next"]`) and the interrupts it stopped at
        (`meta["interrupts"]`, their payloads).
        """
        if not self.present(store):
            return None
        with _saver(store) as saver:
            tuples = list(saver.list({"configurable": {"thread_id": run_id}}))
        if not tuples:
            return None
        by_id = {t.checkpoint["id"]: t for t in tuples}
        steps = []
        for seq, tup in enumerate(sorted(tuples, key=lambda t: t.checkpoint["id"])):
            conf = tup.config["configurable"]
            md: dict[str, Any] = dict(tup.metadata)
            parent = (
                tup.parent_config["configurable"]["checkpoint_id"] if tup.parent_config else None
            )
            before = by_id.get(parent).checkpoint if parent in by_id else None  # type: ignore[union-attr]
            nodes = writer_nodes(tup.checkpoint, md, before)
            ns = conf["checkpoint_ns"]
            name = f"{ns + ' ' if ns else ''}{', '.join(nodes) or '?'} (step {md.get('step', '?')})"
            meta: dict[str, Any] = {
                k: v for k, v in md.items() if isinstance(v, str | int | float | bool)
            }
            meta |= {"node": nodes, "next": next_nodes(tup.checkpoint), "checkpoint_ns": ns,
                     "next_writes": len(tup.pending_writes or [])}  # fmt: skip
            if found := interrupts_of(tup.pending_writes):
                meta["interrupts"] = found
            steps.append(
                StepRecord(
                    run_id=run_id,
                    step_id=conf["checkpoint_id"],
                    key=f"checkpoint:{ns}:{conf['checkpoint_id']}",
                    kind="checkpoint",
                    name=name,
                    status="completed",
                    seq=seq,
                    parent_id=parent,
                    meta=meta,
                    created_at=timestamp(tup.checkpoint.get("ts")),
                )
            )
        return steps

    def heads(self, store: Store, run_id: str) -> dict[str, str]:
        """The thread's branches: `main` at its latest checkpoint, `branch-N` at other leaves.

        A leaf other than the latest checkpoint is a fork (`update_state` or a resume from an
        earlier checkpoint); `branches` lists what `tree` draws.
        """
        steps = [s for s in self.load_steps(store, run_id) or [] if not s.meta["checkpoint_ns"]]
        parents = {s.parent_id for s in steps}
        leaves = [s for s in steps if s.step_id not in parents]
        if not leaves:
            return {}
        out = {"main": leaves[-1].step_id}
        out |= {f"branch-{i}": s.step_id for i, s in enumerate(leaves[:-1], 1)}
        return out

    def output(self, store: Store, run_id: str, step: StepRecord, everything: bool = False) -> Any:
        """The channel values at a checkpoint as JSON data; internal channels only if asked."""
        ns = str(step.meta.get("checkpoint_ns", ""))
        with _saver(store) as saver:
            tup = saver.get_tuple(_conf(run_id, ns, step.step_id))
        return (
            None if tup is None else visible(tup.checkpoint.get("channel_values", {}), everything)
        )

    def delete_run(self, store: Store, run_id: str, *, force: bool = False) -> bool:
        """Delete a thread with all its checkpoints; True if it existed.

        Raises:
            RunLockedError: A saver with `lease=True` is writing the thread (without `force`).
        """
        if self.get_run(store, run_id) is None:
            return False
        with _saver(store) as saver:
            saver.delete_thread(run_id, force=force)
        return True

    def fork_run(self, store: Store, run_id: str, at: str, to: str) -> int:
        """Copy checkpoint `at` and its ancestors (with `at`'s pending writes) to thread `to`.

        Returns:
            How many checkpoints were copied.
        """
        with _saver(store) as saver:
            by_id = {
                t.config["configurable"]["checkpoint_id"]: t
                for t in saver.list({"configurable": {"thread_id": run_id}})
            }
            chain = []
            cur: str | None = at
            while cur is not None and cur in by_id:
                chain.append(by_id[cur])
                parent = by_id[cur].parent_config
                cur = parent["configurable"]["checkpoint_id"] if parent else None
            for tup in reversed(chain):
                ns = tup.config["configurable"]["checkpoint_ns"]
                parent_id = (
                    tup.parent_config["configurable"]["checkpoint_id"]
                    if tup.parent_config
                    else None
                )
                versions = dict(tup.checkpoint.get("channel_versions", {}))
                saver.put(_conf(to, ns, parent_id), tup.checkpoint, tup.metadata, versions)
            if chain:
                head = chain[0]
                ns = head.config["configurable"]["checkpoint_ns"]
                tasks: dict[str, list[tuple[str, Any]]] = {}
                for task_id, channel, value in head.pending_writes or []:
                    tasks.setdefault(task_id, []).append((channel, value))
                for task_id, writes in tasks.items():
                    saver.put_writes(_conf(to, ns, at), writes, task_id)
        return len(chain)

    def export_native(self, store: Store, run_id: str) -> dict[str, Any]:
        """The thread itself for `export` (`meta["langgraph"]`): see `_transfer`."""
        from ._transfer import dump_thread

        with _saver(store) as saver:
            return dump_thread(saver, run_id)

    def import_native(
        self, store: Store, run_id: str, native: Any, *, replace: bool = False
    ) -> int:
        """Write an exported thread into `store` as thread `run_id`; the checkpoint count.

        Raises:
            FileExistsError: The thread exists and `replace` is false (nothing written).
            ThreadImportError: The payload is missing or damaged (nothing written).
        """
        from ._transfer import load_thread

        if self.get_run(store, run_id) is not None:
            if not replace:
                raise FileExistsError(run_id)
            self.delete_run(store, run_id)
        with _saver(store) as saver:
            return load_thread(saver, native, run_id)

    def step_detail(self, store: Store, run_id: str, step_id: str) -> dict[str, Any] | None:
        """One checkpoint for the viewer: channel values, pending writes, metadata (JSON data)."""
        with _saver(store) as saver:
            for tup in saver.list({"configurable": {"thread_id": run_id}}):
                conf = tup.config["configurable"]
                if conf["checkpoint_id"] != step_id:
                    continue
                parent = tup.parent_config["configurable"] if tup.parent_config else {}
                return {
                    "checkpoint_ns": conf["checkpoint_ns"],
                    "parent_id": parent.get("checkpoint_id"),
                    "next": next_nodes(tup.checkpoint),
                    "interrupts": interrupts_of(tup.pending_writes),
                    "channel_values": visible(tup.checkpoint.get("channel_values", {})),
                    "internal_channels": {
                        k: jsonable(v)
                        for k, v in tup.checkpoint.get("channel_values", {}).items()
                        if is_internal(str(k))
                    },
                    "channel_versions": jsonable(tup.checkpoint.get("channel_versions", {})),
                    "pending_writes": [
                        {"task_id": task, "channel": channel, "value": jsonable(value)}
                        for task, channel, value in tup.pending_writes or []
                    ],
                    "metadata": jsonable(dict(tup.metadata)),
                }
        return None


run_source = LangGraphRuns()
"""The object registered under the `agentrewind.run_sources` entry point."""
