"""A LangGraph thread in a portable document, and back into any store as a thread.

`agentrewind export` of a thread carries, beside the readable steps, the thread itself under
`meta["langgraph"]`: every checkpoint (all namespaces) with its metadata and pending writes,
each value as LangGraph's serde typed bytes (base64). `agentrewind import` writes them back
through `RewindSaver.put` / `put_writes` in the target store, so the thread resumes there
(`graph.invoke(None | Command(resume=...), thread)`), whatever the backend. Values are revived
by the target saver's serde: a type it does not allow is refused (`UnsafeCheckpointError`)
before anything is written.
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

__all__ = ["FORMAT", "ThreadImportError", "dump_thread", "load_thread"]

FORMAT = 1
"""Version of the `meta["langgraph"]` payload."""

_PLAIN = JsonPlusSerializer()  # dumping never revives anything: no allowlist needed


class ThreadImportError(ValueError):
    """A document's LangGraph thread cannot be imported (nothing was written)."""


def _typed(value: Any) -> list[str]:
    kind, data = _PLAIN.dumps_typed(value)
    return [kind, base64.b64encode(data).decode("ascii")]


def _untyped(serde: Any, pair: Any) -> Any:
    kind, data = pair
    return serde.loads_typed((kind, base64.b64decode(data)))


def dump_thread(saver: Any, thread_id: str) -> dict[str, Any]:
    """Every checkpoint of a thread, oldest first, as JSON data (see the module docstring)."""
    tuples = sorted(
        saver.list({"configurable": {"thread_id": thread_id}}), key=lambda t: t.checkpoint["id"]
    )
    checkpoints = []
    for tup in tuples:
        conf = tup.config["configurable"]
        parent = tup.parent_config["configurable"]["checkpoint_id"] if tup.parent_config else None
        checkpoints.append(
            {
                "ns": conf["checkpoint_ns"],
                "id": conf["checkpoint_id"],
                "parent": parent,
                "checkpoint": _typed(tup.checkpoint),
                "metadata": _typed(dict(tup.metadata)),
                "writes": [[t, ch, _typed(v)] for t, ch, v in tup.pending_writes or []],
            }
        )
    return {"format": FORMAT, "thread_id": thread_id, "checkpoints": checkpoints}


def load_thread(saver: Any, native: Any, thread_id: str) -> int:
    """Write a dumped thread into `saver`'s store as thread `thread_id`; the checkpoint count.

    Every value is revived first, so a refused type or a damaged payload writes nothing. The
    thread id is then cleared, with its tombstone: a thread deleted there before (`rm`,
    `--replace`) would otherwise refuse the old checkpoints as late writes of its history.

    Raises:
        ThreadImportError: The payload is not a thread this version reads.
        UnsafeCheckpointError: A value names a type the saver's serde does not allow.
    """
    if not isinstance(native, dict) or native.get("format") != FORMAT:
        raise ThreadImportError(
            "the document's LangGraph thread is missing or of an unknown format (export it "
            "again with this version of agentrewind-langgraph)"
        )
    try:
        rows = [
            (
                c["ns"],
                c["id"],
                c["parent"],
                _untyped(saver.serde, c["checkpoint"]),
                _untyped(saver.serde, c["metadata"]),
                [(t, ch, _untyped(saver.serde, v)) for t, ch, v in c["writes"]],
            )
            for c in native["checkpoints"]
        ]
    except (KeyError, TypeError, ValueError) as exc:
        if type(exc).__name__ == "UnsafeCheckpointError":
            raise
        raise ThreadImportError(f"the document's LangGraph thread is damaged: {exc!r}") from None
    # Copying a thread that does not exist leaves `thread_id` empty, its tombstone cleared.
    saver.copy_thread(f"agentrewind-import-empty-{uuid.uuid4().hex}", thread_id)
    for ns, cid, parent, checkpoint, metadata, writes in rows:
        conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
        if parent:
            conf["checkpoint_id"] = parent
        versions = dict(checkpoint.get("channel_versions", {}))
        saver.put({"configurable": conf}, checkpoint, metadata, versions)
        by_task: dict[str, list[tuple[str, Any]]] = {}
        for task, channel, value in writes:
            by_task.setdefault(task, []).append((channel, value))
        at = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}}
        for task, pairs in by_task.items():
            saver.put_writes(at, pairs, task)
    return len(rows)
