"""LangGraph objects to stored rows and back, for every backend of `RewindSaver`.

Serialization goes through LangGraph's own serde (its protocol requires it); nothing here
does I/O.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
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

from ._codec import (
    ListDeltas,
    PutRow,
    RawTuple,
    WriteRow,
    _encrypting,
    decode_metadata,
    encode_metadata,
    split_filter,
    vstr,
)
from ._serde import at, checkpoint_record, value_record, write_record

__all__ = [
    "Chain",
    "collect_history",
    "find_seeds",
    "put_row",
    "query_args",
    "raw_metadata",
    "thread_config",
    "to_tuple",
    "write_rows",
]

Chain = list[tuple[str, str | None, dict[str, str]]]
"""`(checkpoint_id, parent_id, versions)` from a checkpoint towards the root."""
StoredWrite = tuple[str, str, str, bytes]
"""A pending write as stored: `(task_id, channel, type, value)`."""

_APART = frozenset(("id", "channel_versions", "channel_values"))


def thread_config(thread_id: str, cns: str, checkpoint_id: str) -> RunnableConfig:
    """The config naming one checkpoint."""
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": cns,
            "checkpoint_id": checkpoint_id,
        }
    }


def _epoch(ts: str | None) -> float:
    if not ts:
        return time.time()
    try:
        return dt.datetime.fromisoformat(ts).timestamp()
    except ValueError:
        return time.time()


def to_tuple(serde: SerializerProtocol, raw: RawTuple) -> CheckpointTuple:
    """Deserialize a stored checkpoint into LangGraph's `CheckpointTuple`.

    With an encrypting serde each value is read at its place (see `_serde.at`): a ciphertext
    copied from another thread, checkpoint or channel is a `DecryptionError`.
    """
    if _encrypting(serde):
        return _sealed_tuple(serde, raw)
    loads = serde.loads_typed
    checkpoint = loads((raw.cp_type, raw.checkpoint))
    checkpoint["id"] = raw.checkpoint_id
    checkpoint["channel_versions"] = dict(raw.versions)
    checkpoint["channel_values"] = {ch: loads(typed) for ch, typed in raw.values.items()}
    return CheckpointTuple(
        config=thread_config(raw.thread_id, raw.cns, raw.checkpoint_id),
        checkpoint=checkpoint,
        metadata=decode_metadata(serde, raw.md_text, raw.md_type, raw.md_blob),
        parent_config=(
            thread_config(raw.thread_id, raw.cns, raw.parent_id) if raw.parent_id else None
        ),
        pending_writes=[(task, ch, loads((typ, val))) for task, ch, typ, val in raw.writes],
    )


def raw_metadata(serde: SerializerProtocol, raw: RawTuple) -> Any:
    """A stored checkpoint's metadata (read at its place when encrypted)."""
    if not _encrypting(serde):
        return decode_metadata(serde, raw.md_text, raw.md_type, raw.md_blob)
    with at(raw.thread_id, checkpoint_record(raw.cns, raw.checkpoint_id), "metadata"):
        return decode_metadata(serde, raw.md_text, raw.md_type, raw.md_blob)


def _sealed_tuple(serde: SerializerProtocol, raw: RawTuple) -> CheckpointTuple:
    """`to_tuple` of an encrypting saver: every value read at its place."""
    loads, tid, cns, cid = serde.loads_typed, raw.thread_id, raw.cns, raw.checkpoint_id
    record = checkpoint_record(cns, cid)
    with at(tid, record, "checkpoint"):
        checkpoint = loads((raw.cp_type, raw.checkpoint))
    metadata = raw_metadata(serde, raw)
    values = {}
    for ch, typed in raw.values.items():
        with at(tid, value_record(cns, raw.versions.get(ch, "")), ch):
            values[ch] = loads(typed)
    writes: list[PendingWrite] = []
    for task, ch, typ, val in raw.writes:
        with at(tid, write_record(cns, cid, task), ch):
            writes.append((task, ch, loads((typ, val))))
    checkpoint["id"] = cid
    checkpoint["channel_versions"] = dict(raw.versions)
    checkpoint["channel_values"] = values
    return CheckpointTuple(
        config=thread_config(tid, cns, cid),
        checkpoint=checkpoint,
        metadata=metadata,
        parent_config=thread_config(tid, cns, raw.parent_id) if raw.parent_id else None,
        pending_writes=writes,
    )


def put_row(
    serde: SerializerProtocol,
    deltas: ListDeltas,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
) -> PutRow:
    """Serialize what `put` stores.

    The checkpoint is stored apart from its values; only the channels in `new_versions` get
    a value row (a growing list as its new items, via `deltas`).
    """
    conf = config["configurable"]
    thread_id, cns = str(conf["thread_id"]), conf.get("checkpoint_ns", "")
    # `id` and `channel_versions` are stored in columns of their own, the values apart.
    c = {k: v for k, v in checkpoint.items() if k not in _APART}
    values: Mapping[str, Any] = checkpoint.get("channel_values") or {}
    md = get_checkpoint_metadata(config, metadata)
    dumps, row = serde.dumps_typed, deltas.row
    if _encrypting(serde):  # each value sealed at its place (see `_serde.at`)
        record = checkpoint_record(cns, checkpoint["id"])
        with at(thread_id, record, "checkpoint"):
            cp_type, cp_bytes = dumps(c)
        with at(thread_id, record, "metadata"):
            md_text, md_type, md_blob = encode_metadata(serde, md)
        blobs = []
        for ch, version in new_versions.items():
            if ch in values:
                with at(thread_id, value_record(cns, vstr(version)), ch):
                    blobs.append(row(thread_id, cns, ch, vstr(version), dumps(values[ch])))
    else:
        cp_type, cp_bytes = dumps(c)
        # A channel versioned without a value (cleared, or a DeltaChannel step) gets no row.
        blobs = [
            row(thread_id, cns, ch, vstr(version), dumps(values[ch]))
            for ch, version in new_versions.items()
            if ch in values
        ]
        md_text, md_type, md_blob = encode_metadata(serde, md)
    run_id = md.get("run_id")
    return PutRow(
        thread_id=thread_id,
        cns=cns,
        checkpoint_id=checkpoint["id"],
        parent_id=conf.get("checkpoint_id"),
        run_id=run_id if isinstance(run_id, str) else None,
        cp_type=cp_type,
        checkpoint=cp_bytes,
        versions={
            ch: v if type(v) is str else vstr(v) for ch, v in checkpoint["channel_versions"].items()
        },
        md_text=md_text,
        md_type=md_type,
        md_blob=md_blob,
        ts=_epoch(checkpoint.get("ts")),
        blobs=blobs,
    )


def write_rows(
    serde: SerializerProtocol,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
    config: RunnableConfig,
) -> list[WriteRow]:
    """Serialize the pending writes of one task (special channels get their fixed index).

    `config` names the checkpoint they belong to (an encrypting serde seals them there).
    A special channel written twice in one call (two interrupts of one node) keeps the last
    write, as a second call's would replace the first: one row per index, so no store sees
    one key twice in a statement (PostgreSQL refuses an upsert that would).
    """
    rows: dict[int, WriteRow] = {}
    conf = config["configurable"]
    sealed = _encrypting(serde)
    record = write_record(conf.get("checkpoint_ns", ""), conf.get("checkpoint_id") or "", task_id)
    for idx, (channel, value) in enumerate(writes):
        if sealed:
            with at(str(conf["thread_id"]), record, channel):
                typ, data = serde.dumps_typed(value)
        else:
            typ, data = serde.dumps_typed(value)
        key = WRITES_IDX_MAP.get(channel, idx)
        rows[key] = WriteRow(task_id, key, task_path, channel, typ, data)
    return list(rows.values())


def find_seeds(
    serde: SerializerProtocol,
    chain: Chain,
    channels: Sequence[str],
    values: Mapping[tuple[str, str], tuple[str, bytes] | None],
    where: tuple[str, str] = ("", ""),
) -> tuple[dict[str, Any], dict[str, set[str]]]:
    """Walk the ancestors (newest first) until each channel has a stored value (its seed).

    `where`: the thread and checkpoint namespace (the values' place, when encrypted).

    Returns:
        `(seeds, needed)`: the seed value per channel that has one, and per ancestor visited
        the channels whose writes at that ancestor belong to the history.
    """
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
                with at(where[0], value_record(where[1], versions[ch]), ch):
                    seeds[ch] = serde.loads_typed(typed)
                remaining.discard(ch)
    return seeds, needed


def collect_history(
    serde: SerializerProtocol,
    chain: Chain,
    channels: Sequence[str],
    seeds: Mapping[str, Any],
    needed: Mapping[str, set[str]],
    writes: Mapping[str, list[StoredWrite]],
    where: tuple[str, str] = ("", ""),
) -> dict[str, DeltaChannelHistory]:
    """Each channel's writes, oldest ancestor first, after its seed (`find_seeds`)."""
    collected: dict[str, list[PendingWrite]] = {ch: [] for ch in channels}
    for ancestor, _, _ in reversed([c for c in chain if c[0] in needed]):
        for task, ch, typ, val in writes.get(ancestor, []):
            if ch in needed[ancestor]:
                with at(where[0], write_record(where[1], ancestor, task), ch):
                    collected[ch].append((task, ch, serde.loads_typed((typ, val))))
    out: dict[str, DeltaChannelHistory] = {}
    for ch in channels:
        entry: DeltaChannelHistory = {"writes": collected[ch]}
        if ch in seeds:
            entry["seed"] = seeds[ch]
        out[ch] = entry
    return out


def query_args(
    config: RunnableConfig | None,
    filter: Mapping[str, Any] | None,
    before: RunnableConfig | None,
    limit: int | None,
    latest: bool,
) -> dict[str, Any]:
    """The arguments of a backend's `query` (and `aquery`) for a saver's `list`/`get_tuple`."""
    conf = (config or {}).get("configurable", {})
    pushdown, exact = split_filter(filter)
    cns = conf.get("checkpoint_ns")
    return {
        "thread_id": str(conf["thread_id"]) if "thread_id" in conf else None,
        "cns": "" if latest and cns is None else cns,
        "checkpoint_id": conf.get("checkpoint_id") or None,
        "before": get_checkpoint_id(before) if before else None,
        "pushdown": pushdown,
        "limit": limit if exact else None,
        "now": time.time(),
    }
