"""Copy an existing `SqliteSaver` or `PostgresSaver` database into a `RewindSaver` store."""

from __future__ import annotations

import argparse
import json
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

from langgraph.checkpoint.base import CheckpointMetadata

from agentrewind.adapters import StoreError

from ._codec import WriteRow
from ._serde import SafeSerializer
from .saver import RewindSaver

__all__ = ["migrate_postgres_saver", "migrate_sqlite_saver", "register_cli"]


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
        history = (
            (tid, cns, cid, parent, reader.loads_typed((typ, blob)),
             cast(CheckpointMetadata, json.loads(md) if md is not None else {}))
            for tid, cns, cid, parent, typ, blob, md in rows
        )  # fmt: skip
        counts["threads"], counts["checkpoints"] = _put_history(saver, history)
        writes = src.execute(
            "SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, "
            "type, value FROM writes ORDER BY thread_id, checkpoint_ns, checkpoint_id, task_id, idx"
        ).fetchall()
        counts["writes"] = _put_writes(saver, writes)
    finally:
        src.close()
        if not isinstance(dest, RewindSaver):
            saver.close()
    return counts


def _put_history(
    saver: RewindSaver, rows: Iterable[tuple[str, str, str, str | None, Any, CheckpointMetadata]]
) -> tuple[int, int]:
    """`put` each `(thread, ns, id, parent, checkpoint, metadata)`, parents first; counts."""
    versions_of: dict[tuple[str, str, str], dict[str, Any]] = {}
    threads: set[str] = set()
    n = 0
    for tid, cns, cid, parent, checkpoint, metadata in rows:
        prev = versions_of.get((tid, cns, parent or ""), {})
        current = checkpoint.get("channel_versions", {})
        new_versions = {ch: v for ch, v in current.items() if prev.get(ch) != v}
        versions_of[(tid, cns, cid)] = current
        conf: dict[str, Any] = {"thread_id": tid, "checkpoint_ns": cns}
        if parent:
            conf["checkpoint_id"] = parent
        saver.put({"configurable": conf}, checkpoint, metadata, new_versions)
        threads.add(tid)
        n += 1
    return len(threads), n


def _put_writes(saver: RewindSaver, rows: Iterable[tuple[Any, ...]]) -> int:
    """Store `(thread, ns, id, task, task_path, idx, channel, type, value)` rows; count."""
    groups: dict[tuple[str, str, str], list[WriteRow]] = {}
    for tid, cns, cid, task, task_path, idx, ch, typ, value in rows:
        row = WriteRow(task, idx, task_path or "", ch, typ or "null", bytes(value or b""))
        groups.setdefault((tid, cns, cid), []).append(row)
    for (tid, cns, cid), group in groups.items():
        op = saver.backend.put_writes_op(tid, cns, cid, group, time.time(), saver.ttl)
        saver.backend.execute(op)
    return sum(len(g) for g in groups.values())


def migrate_postgres_saver(
    src_url: str, dest: str | RewindSaver, *, serde: Any | None = None
) -> dict[str, int]:
    """Copy every checkpoint and pending write of a `PostgresSaver` database into a `RewindSaver`.

    Reads the `checkpoints`, `checkpoint_blobs` and `checkpoint_writes` tables (of the
    `search_path` the URL gives, e.g. `?options=-csearch_path%3Dmyschema`) one thread at a
    time; the source is only read. Channel values are stored the RewindSaver way.

    Args:
        src_url: libpq URL of the PostgresSaver database.
        dest: A store URL (any backend) or an open `RewindSaver`.
        serde: The serializer the source was written with (default: `SafeSerializer`,
            LangGraph's safe types only).

    Returns:
        Counts: `threads`, `checkpoints`, `writes`.

    Raises:
        StoreError: The source cannot be reached or is not a PostgresSaver database.
    """
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - the postgres extra is missing
        raise StoreError('reading PostgresSaver needs "agentrewind[postgres]"') from exc
    reader = serde or SafeSerializer()
    counts = {"threads": 0, "checkpoints": 0, "writes": 0}
    try:
        src = psycopg.connect(src_url, autocommit=True)
    except psycopg.Error as exc:
        raise StoreError(f"cannot open the PostgresSaver database: {exc}") from exc
    saver = dest if isinstance(dest, RewindSaver) else RewindSaver(dest)
    try:
        try:
            threads = [t for (t,) in src.execute("SELECT DISTINCT thread_id FROM checkpoints")]
        except psycopg.Error as exc:
            raise StoreError(f"not a PostgresSaver database: {exc}") from exc
        for tid in sorted(threads):
            blobs = {
                (cns, ch, ver): (typ, blob)
                for cns, ch, ver, typ, blob in src.execute(
                    "SELECT checkpoint_ns, channel, version, type, blob FROM checkpoint_blobs"
                    " WHERE thread_id = %s",
                    (tid,),
                )
            }
            rows = src.execute(
                "SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata"
                " FROM checkpoints WHERE thread_id = %s ORDER BY checkpoint_ns, checkpoint_id",
                (tid,),
            ).fetchall()
            history = []
            for cns, cid, parent, cp, md in rows:
                values = dict(cp.get("channel_values") or {})
                for ch, ver in (cp.get("channel_versions") or {}).items():
                    typed = blobs.get((cns, ch, str(ver)))
                    if typed is not None and typed[0] != "empty":
                        values[ch] = reader.loads_typed((typed[0], bytes(typed[1] or b"")))
                history.append((tid, cns, cid, parent, {**cp, "channel_values": values}, md))
            _, n = _put_history(saver, history)
            counts["checkpoints"] += n
            counts["writes"] += _put_writes(
                saver,
                src.execute(
                    "SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx,"
                    " channel, type, blob FROM checkpoint_writes WHERE thread_id = %s"
                    " ORDER BY checkpoint_ns, checkpoint_id, task_id, idx",
                    (tid,),
                ),
            )
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


def _pg_cmd(args: argparse.Namespace) -> int:
    counts = migrate_postgres_saver(args.src, args.to or args.store or _default())
    print(
        f"copied {counts['threads']} thread(s), {counts['checkpoints']} checkpoint(s), "
        f"{counts['writes']} pending write(s) from the PostgresSaver database"
    )
    return 0


def register_cli(subparsers: Any) -> None:
    """Add `migrate-sqlite-saver SRC.db` and `migrate-postgres-saver SRC_URL` (`--to URL`).

    Registered under both command names as entry points; a second call adds nothing.
    """
    if "migrate-sqlite-saver" in subparsers.choices:
        return
    p = subparsers.add_parser(
        "migrate-sqlite-saver", help="copy a LangGraph SqliteSaver database into a store"
    )
    p.add_argument("src", help="the SqliteSaver database file")
    p.add_argument("--to", default=None, help="destination store URL (default: --store)")
    p.set_defaults(func=_cmd)
    p = subparsers.add_parser(
        "migrate-postgres-saver", help="copy a LangGraph PostgresSaver database into a store"
    )
    p.add_argument("src", help="libpq URL of the PostgresSaver database")
    p.add_argument("--to", default=None, help="destination store URL (default: --store)")
    p.set_defaults(func=_pg_cmd)
