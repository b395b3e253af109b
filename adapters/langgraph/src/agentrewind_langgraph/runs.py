"""LangGraph threads and their checkpoints for the CLI's `runs`, `log` and `tree`."""

from __future__ import annotations

import time
from typing import Any

from agentrewind.adapters import RunInfo, StepRecord, Store

from .saver import RewindSaver

__all__ = ["LangGraphRuns", "run_source"]


class LangGraphRuns:
    """A `RunSource`: LangGraph threads as runs, their checkpoints as steps."""

    name = "langgraph"

    def list_runs(self, store: Store, *, limit: int) -> list[RunInfo]:
        """Threads of the store's namespace, most recently updated first."""
        saver = RewindSaver(store)
        try:
            rows = saver.backend.list_threads(limit, time.time())
        finally:
            saver.close()
        return [
            RunInfo(t, "langgraph", created, updated, expires, meta={"source": "langgraph"})
            for t, created, updated, expires in rows
        ]

    def load_steps(self, store: Store, run_id: str) -> list[StepRecord] | None:
        """Every checkpoint of a thread (all namespaces), oldest first, linked by `parent_id`."""
        saver = RewindSaver(store)
        try:
            tuples = list(saver.list({"configurable": {"thread_id": run_id}}))
        finally:
            saver.close()
        if not tuples:
            return None
        steps = []
        for seq, tup in enumerate(sorted(tuples, key=lambda t: t.checkpoint["id"])):
            conf = tup.config["configurable"]
            md: dict[str, Any] = dict(tup.metadata)
            parent = (
                tup.parent_config["configurable"]["checkpoint_id"] if tup.parent_config else None
            )
            ns = conf["checkpoint_ns"]
            name = f"{ns + ' ' if ns else ''}step {md.get('step', '?')} ({md.get('source', '?')})"
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
                    meta={k: v for k, v in md.items() if isinstance(v, str | int | float | bool)}
                    | {"checkpoint_ns": ns, "next_writes": len(tup.pending_writes or [])},
                )
            )
        return steps

    def step_detail(self, store: Store, run_id: str, step_id: str) -> dict[str, Any] | None:
        """One checkpoint for the viewer: channel values, pending writes, metadata (JSON data)."""
        saver = RewindSaver(store)
        try:
            for tup in saver.list({"configurable": {"thread_id": run_id}}):
                conf = tup.config["configurable"]
                if conf["checkpoint_id"] != step_id:
                    continue
                parent = tup.parent_config["configurable"] if tup.parent_config else {}
                return {
                    "checkpoint_ns": conf["checkpoint_ns"],
                    "parent_id": parent.get("checkpoint_id"),
                    "channel_values": _jsonable(tup.checkpoint.get("channel_values", {})),
                    "channel_versions": _jsonable(tup.checkpoint.get("channel_versions", {})),
                    "pending_writes": [
                        {"task_id": task, "channel": channel, "value": _jsonable(value)}
                        for task, channel, value in tup.pending_writes or []
                    ],
                    "metadata": _jsonable(dict(tup.metadata)),
                }
        finally:
            saver.close()
        return None


def _jsonable(value: Any, depth: int = 0) -> Any:
    """Plain JSON data for display: models dumped, unknown objects as their repr."""
    if depth > 50:
        return repr(value)
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v, depth + 1) for v in value]
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return _jsonable(dump(), depth + 1)
        except Exception:
            pass
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return repr(value)


run_source = LangGraphRuns()
"""The object registered under the `agentrewind.run_sources` entry point."""
