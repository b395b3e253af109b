"""Copy an existing `SqliteSaver` database into a `RewindSaver` store, history intact."""

from __future__ import annotations

import argparse
import json
import sqlite3
import time
from pathlib import Path
from typing import Any, cast

from langgraph.checkpoint.base import CheckpointMetadata

from agentrewind.adapters import StoreError

from ._codec import WriteRow
from ._serde import SafeSerializer
from .saver import RewindSaver

__all__ = ["migrate_sqlite_saver", "register_cli"]


def migrate_sqlite_saver(
    src_path: str | Path, dest: str | RewindSaver, *, serde: Any | None = None
) -> dict[str, int]:
    """Copy every checkpoint and pending write of a `SqliteSaver` file into a `RewindSaver`.

    Parent links, namespaces, metadata and write order are kept; channel values are stored
    the RewindSaver way (one value per changed channel version). The source is only read.

    Args:
        src_path: The SqliteSaver (or AsyncSqliteSaver) database file.
        dest: A store URL or an open `RewindSaver`.
        serde: The serializer the source was written with (default: LangGraph's, safe types only).

    Returns:
        Counts: `threads`, `checkpoints`, `writes`.

    Raises:
        StoreError: The source is missing or is not a SqliteSaver database.
    """
    path = Path(src_path)
    if not path.is_file():
        raise StoreError(f"no SqliteSaver database at {path}")
    src = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    saver = dest if isinstance(dest, RewindSaver) else RewindSaver(dest)
    reader = serde or SafeSerializer()
    counts = {"threads": 0, "checkpoints": 0, "writes": 0}
    try:
        try:
            rows = src.execute(
                "SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, "
                "checkpoint, metadata FROM checkpoints ORDER BY thread_id, checkpoint_ns, "
                "checkpoint_id"
            ).fetchall()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{path} is not a SqliteSaver database: {exc}") from exc
        versions_of: dict[tuple[str, str, str], dict[str, Any]] = {}
        threads = set()
        for tid, cns, cid, parent, typ, blob, md in rows:
            checkpoint = reader.loads_typed((typ, blob))
            metadata = cast(CheckpointMetadata, json.loads(md) if md is not None else {})
            prev = versions_of.get((tid, cns, parent or ""), {})
            current = checkpoint.get("channel_versions", {})
            new_versions = {ch: v for ch, v in current.items() if prev.get(ch) != v}
            versions_of[(tid, cns, cid)] = current
            conf: dict[str, Any] = {"thread_id": tid, "checkpoint_ns": cns}
            if parent:
                conf["checkpoint_id"] = parent
            saver.put({"configurable": conf}, checkpoint, metadata, new_versions)
            threads.add(tid)
            counts["checkpoints"] += 1
        writes = src.execute(
            "SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, "
            "type, value FROM writes ORDER BY thread_id, checkpoint_ns, checkpoint_id, task_id, idx"
        ).fetchall()
        groups: dict[tuple[str, str, str], list[WriteRow]] = {}
        for tid, cns, cid, task, task_path, idx, ch, typ, value in writes:
            row = WriteRow(task, idx, task_path or "", ch, typ or "null", value or b"")
            groups.setdefault((tid, cns, cid), []).append(row)
        for (tid, cns, cid), group in groups.items():
            op = saver.backend.put_writes_op(tid, cns, cid, group, time.time(), saver.ttl)
            saver.backend.execute(op)
            counts["writes"] += len(group)
        counts["threads"] = len(threads)
    finally:
        src.close()
        if not isinstance(dest, RewindSaver):
            saver.close()
    return counts


def _cmd(args: argparse.Namespace) -> int:
    counts = migrate_sqlite_saver(args.src, args.to or args.store or _default())
    print(
        f"copied {counts['threads']} thread(s), {counts['checkpoints']} checkpoint(s), "
        f"{counts['writes']} pending write(s) from {args.src}"
    )
    return 0


def _default() -> str:
    from agentrewind.adapters import default_url

    return default_url()


def register_cli(subparsers: Any) -> None:
    """Add `agentrewind migrate-sqlite-saver SRC.db --to URL` (entry point of the CLI)."""
    p = subparsers.add_parser(
        "migrate-sqlite-saver", help="copy a LangGraph SqliteSaver database into a store"
    )
    p.add_argument("src", help="the SqliteSaver database file")
    p.add_argument("--to", default=None, help="destination store URL (default: --store)")
    p.set_defaults(func=_cmd)
