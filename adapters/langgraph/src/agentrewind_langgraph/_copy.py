"""Copying an encrypted thread: each value is decrypted at its place and sealed at the new one.

An encrypting saver binds every ciphertext to its thread (see `_serde.at`), so the backends'
row-for-row copy would leave values the new thread cannot decrypt. `copy_thread` of such a
saver reads the thread through the serde and writes each checkpoint, its values and its
pending writes again under the new thread id (same checkpoint ids, parents and metadata).
A saver without the key refuses to copy an encrypted thread instead of copying values
nobody could read.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from langchain_core.runnables import RunnableConfig

from agentrewind.adapters import DecryptionError

from ._codec import _encrypting
from ._rows import put_row, query_args, write_rows

__all__ = ["probe_args", "refuse_sealed", "sealed", "sealed_copy_ops"]


def sealed(saver: Any) -> bool:
    """Whether `saver` encrypts (its copies re-seal each value)."""
    return _encrypting(saver.serde)


def probe_args(src: str) -> dict[str, Any]:
    """The backend `query` arguments reading `src`'s latest checkpoint (for `refuse_sealed`)."""
    return query_args({"configurable": {"thread_id": src}}, None, None, 1, False)


def refuse_sealed(src: str, raws: Iterable[Any]) -> None:
    """Raise `DecryptionError` when `src` holds encrypted checkpoints (a saver without a key).

    `raws`: what the backend's `query(**probe_args(src))` returned (sync or async).
    """
    for raw in raws:
        if "+" in raw.cp_type:
            raise DecryptionError(
                f"thread {src!r} is encrypted: copying it binds each value to the new thread, "
                "which needs the key; open the saver with encryption=Encryption(key) (or "
                "$AGENTREWIND_ENCRYPTION_KEY). Nothing was copied"
            )
        return


def _config(thread_id: str, cns: str, checkpoint_id: str | None) -> RunnableConfig:
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": cns}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def sealed_copy_ops(saver: Any, src: str, dst: str) -> list[Any]:
    """The backend operations writing `src`'s history again as `dst`, oldest first.

    Reading decrypts every value at its place in `src` (a `DecryptionError` before anything
    is written when one does not authenticate); writing seals it at its place in `dst`.
    """
    tuples = list(saver.list({"configurable": {"thread_id": src}}))  # every namespace
    now, ops = time.time(), []
    for tup in reversed(tuples):
        conf = tup.config["configurable"]
        cns, cid = conf["checkpoint_ns"], conf["checkpoint_id"]
        parent = tup.parent_config["configurable"]["checkpoint_id"] if tup.parent_config else None
        versions = dict(tup.checkpoint.get("channel_versions", {}))
        row = put_row(
            saver.serde, saver._deltas, _config(dst, cns, parent), tup.checkpoint,
            tup.metadata, versions,
        )  # fmt: skip
        ops.append(saver.backend.put_op(row, now, saver.ttl))
        tasks: dict[str, list[tuple[str, Any]]] = {}
        for task_id, channel, value in tup.pending_writes or []:
            tasks.setdefault(task_id, []).append((channel, value))
        for task_id, writes in tasks.items():
            rows = write_rows(saver.serde, writes, task_id, "", _config(dst, cns, cid))
            ops.append(saver.backend.put_writes_op(dst, cns, cid, rows, now, saver.ttl))
    return ops
