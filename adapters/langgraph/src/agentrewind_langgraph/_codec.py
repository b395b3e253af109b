"""Backend-neutral pieces of `RewindSaver`: rows, metadata, list deltas, retention plans.

Both backends (SQLite and Redis) store the same rows; everything that is not I/O lives here
so the two never drift apart.
"""

from __future__ import annotations

import dataclasses
import json
import struct
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

import ormsgpack
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

from ._serde import AesGcmCipher, plaintext_refused

__all__ = [
    "BlobRow",
    "CheckpointInfo",
    "ListDeltas",
    "PutRow",
    "RawTuple",
    "WriteRow",
    "assemble_blob",
    "decode_metadata",
    "encode_metadata",
    "pack_versions",
    "plan_removal",
    "split_filter",
    "unpack_versions",
    "vstr",
]

MIN_DELTA_ITEMS = 16
"""Lists shorter than this are always stored whole: a delta would not pay for itself."""
MAX_DELTA_DEPTH = 2048
"""Upper bound on deltas between two full copies (reads follow at most this many rows)."""


def vstr(version: Any) -> str:
    """The text form of a channel version used in keys and rows."""
    return version if isinstance(version, str) else str(version)


@dataclasses.dataclass(slots=True)
class BlobRow:
    """One stored channel value: kind `f` full, `d` items appended to `base`, `e` empty."""

    channel: str
    version: str
    kind: str
    base: str | None
    n: int
    type: str
    value: bytes
    full: bytes | None = None  # for a delta row: the full value, used if `base` is gone


@dataclasses.dataclass(slots=True)
class PutRow:
    """Everything `put` stores, already serialized."""

    thread_id: str
    cns: str
    checkpoint_id: str
    parent_id: str | None
    run_id: str | None
    cp_type: str
    checkpoint: bytes  # without `id`, `channel_versions` and `channel_values` (stored apart)
    versions: dict[str, str]  # {channel: version text}
    md_text: str | None
    md_type: str
    md_blob: bytes | None
    ts: float
    blobs: list[BlobRow]


@dataclasses.dataclass(slots=True)
class WriteRow:
    """One pending write."""

    task_id: str
    idx: int
    task_path: str
    channel: str
    type: str
    value: bytes


@dataclasses.dataclass(slots=True)
class RawTuple:
    """A stored checkpoint as the backends return it (not yet deserialized)."""

    thread_id: str
    cns: str
    checkpoint_id: str
    parent_id: str | None
    cp_type: str
    checkpoint: bytes
    versions: dict[str, str]
    md_text: str | None
    md_type: str
    md_blob: bytes | None
    values: dict[str, tuple[str, bytes]]
    writes: list[tuple[str, str, str, bytes]]  # (task_id, channel, type, value), sorted


@dataclasses.dataclass(slots=True)
class CheckpointInfo:
    """What retention planning needs to know about one checkpoint."""

    cns: str
    checkpoint_id: str
    parent_id: str | None
    versions: dict[str, str]
    run_id: str | None = None


def pack_versions(versions: Mapping[str, str]) -> bytes:
    """`{channel: version}` as stored (msgpack)."""
    return ormsgpack.packb(versions)


def unpack_versions(data: bytes | str) -> dict[str, str]:
    """Inverse of `pack_versions`; also reads the JSON text of schema version 1 rows."""
    out: dict[str, str] = json.loads(data) if isinstance(data, str) else ormsgpack.unpackb(data)
    return out


# -- metadata ----------------------------------------------------------------------------------
def _plain(value: Any) -> bool:
    t = type(value)
    if t is str or t is int or t is bool or value is None:
        return True
    if t is float:
        return value == value and value not in (float("inf"), float("-inf"))
    if t is list:
        return all(_plain(v) for v in value)
    if t is dict:
        return all(type(k) is str and _plain(v) for k, v in value.items())
    return False


_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_ENCRYPTING: dict[type, bool] = {}
"""Per serde class: whether it encrypts (`isinstance` against LangGraph's serializer, a
`Protocol` subclass, costs microseconds on every `put`)."""


def _encrypting(serde: Any) -> bool:
    kind = type(serde)
    known = _ENCRYPTING.get(kind)
    if known is None:
        known = _ENCRYPTING[kind] = isinstance(serde, EncryptedSerializer)
    return known


def encode_metadata(
    serde: Any, metadata: Mapping[str, Any]
) -> tuple[str | None, str, bytes | None]:
    """JSON text when it round-trips exactly (filterable in SQL/Lua), else LangGraph's serde.

    With an encrypting serde it is always the serde: metadata is not stored in clear.
    """
    md = metadata if type(metadata) is dict else dict(metadata)
    if not _encrypting(serde) and _plain(md):
        return _JSON.encode(md), "json", None
    md_type, md_blob = serde.dumps_typed(dict(metadata))
    return None, md_type, md_blob


def decode_metadata(serde: Any, text: str | None, md_type: str, blob: bytes | None) -> Any:
    """Inverse of `encode_metadata`; an encrypting saver refuses plaintext metadata.

    Raises:
        DecryptionError: Plaintext metadata read by an encrypting saver (not migrating).
    """
    if md_type == "json":
        cipher = getattr(serde, "cipher", None)
        if isinstance(cipher, AesGcmCipher) and not cipher.encryption.migrate:
            raise plaintext_refused(cipher, "checkpoint's metadata")
        return json.loads(text or "{}")
    return serde.loads_typed((md_type, blob or b""))


def split_filter(
    filter: Mapping[str, Any] | None,
) -> tuple[list[tuple[str, Any]], bool]:
    """Return `(pushdown, exact)`: equality terms a backend can evaluate on stored JSON.

    Only str, int and float values are pushed down (a JSON engine would confuse `True` with
    `1`); callers always re-check the full filter on decoded metadata, and `exact` tells
    them whether the backend's filtering alone already matches it, so a limit can be pushed.
    """
    if not filter:
        return [], True
    pushdown = [(k, v) for k, v in filter.items() if type(v) in (str, int, float) and v == v]
    return pushdown, False


def matches(metadata: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """True when every filter key equals the metadata's value."""
    return not filter or all(k in metadata and metadata[k] == v for k, v in filter.items())


# -- list deltas -------------------------------------------------------------------------------
def _array_header(data: bytes) -> tuple[int, int] | None:
    """`(item_count, header_size)` when `data` is a msgpack array, else None."""
    if not data:
        return None
    b = data[0]
    if 0x90 <= b <= 0x9F:
        return b & 0x0F, 1
    if b == 0xDC and len(data) >= 3:
        return struct.unpack(">H", data[1:3])[0], 3
    if b == 0xDD and len(data) >= 5:
        return struct.unpack(">I", data[1:5])[0], 5
    return None


def _make_header(count: int) -> bytes:
    if count < 16:
        return bytes([0x90 | count])
    if count < 0x10000:
        return b"\xdc" + struct.pack(">H", count)
    return b"\xdd" + struct.pack(">I", count)


class _Last:
    __slots__ = ("body", "count", "depth", "root_count", "version")

    def __init__(self, version: str, body: bytes, count: int, root_count: int, depth: int):
        self.version = version
        self.body = body
        self.count = count
        self.root_count = root_count
        self.depth = depth


class ListDeltas:
    """Stores a growing list channel as its new items only.

    LangGraph's serde writes a list as a msgpack array: a header, then each item's bytes. When
    a channel's new value starts with exactly the bytes of the value this process stored last
    for it (an `operator.add` or `add_messages` append), the row keeps only the new items and
    points at the previous version. A full copy is written again once the list has doubled
    since the last one, so storage stays linear and a read joins few rows. Byte comparison
    (not object identity) makes it safe against items mutated in place.

    Args:
        capacity: How many (thread, namespace, channel) entries to remember.
    """

    def __init__(self, capacity: int = 512) -> None:
        self._last: OrderedDict[tuple[str, str, str], _Last] = OrderedDict()
        self._lock = threading.Lock()
        self.capacity = capacity

    def row(
        self, thread_id: str, cns: str, channel: str, version: str, typed: tuple[str, bytes]
    ) -> BlobRow:
        """The row to store for a channel value serialized as `typed`."""
        type_, data = typed
        head = _array_header(data) if type_ == "msgpack" else None
        key = (thread_id, cns, channel)
        if head is None or head[0] < MIN_DELTA_ITEMS:
            if key in self._last:
                with self._lock:
                    self._last.pop(key, None)
            return BlobRow(channel, version, "f", None, 0, type_, data)
        count, hsize = head
        body = memoryview(data)[hsize:]
        with self._lock:
            last = self._last.get(key)
        row: BlobRow | None = None
        if (
            last is not None
            and count >= MIN_DELTA_ITEMS
            and count >= last.count
            and count <= 2 * last.root_count
            and last.depth < MAX_DELTA_DEPTH
            and len(body) >= len(last.body)
            and body[: len(last.body)] == last.body
        ):
            tail = bytes(body[len(last.body) :])
            row = BlobRow(channel, version, "d", last.version, count - last.count, type_, tail)
            row.full = data
            new = _Last(version, bytes(body), count, last.root_count, last.depth + 1)
        else:
            row = BlobRow(channel, version, "f", None, count, type_, data)
            new = _Last(version, bytes(body), count, max(count, MIN_DELTA_ITEMS), 0)
        with self._lock:
            self._last[key] = new
            self._last.move_to_end(key)
            while len(self._last) > self.capacity:
                self._last.popitem(last=False)
        return row

    def forget(self, thread_id: str | None = None) -> None:
        """Drop what is remembered (for one thread, or all): the next write is a full copy."""
        with self._lock:
            if thread_id is None:
                self._last.clear()
            else:
                for key in [k for k in self._last if k[0] == thread_id]:
                    del self._last[key]


def assemble_blob(chain: list[tuple[str, int, str, bytes | None]]) -> tuple[str, bytes] | None:
    """Join a blob chain `[(kind, n, type, value)]` (requested row first) into one typed value.

    Returns None for an empty marker or a broken chain (its base row is gone).
    """
    if not chain:
        return None
    kind, _, type_, value = chain[0]
    if kind == "e":
        return None
    if kind == "f":
        return type_, value or b""
    if chain[-1][0] != "f":
        return None
    full = chain[-1][3] or b""
    head = _array_header(full)
    if head is None:
        return None
    parts = [memoryview(full)[head[1] :]]
    total = head[0]
    for _, n, _, tail in reversed(chain[:-1]):
        parts.append(memoryview(tail or b""))
        total += n
    return type_, _make_header(total) + b"".join(parts)


# -- retention ---------------------------------------------------------------------------------
def plan_removal(
    checkpoints: Iterable[CheckpointInfo],
    blobs: Mapping[tuple[str, str, str], tuple[str, str | None]],
    *,
    keep_last: int | None = None,
    doomed: set[tuple[str, str]] | None = None,
) -> tuple[set[tuple[str, str]], set[tuple[str, str, str]]]:
    """Decide which checkpoints and blobs of one thread to delete.

    Args:
        checkpoints: Every checkpoint of the thread.
        blobs: `(cns, channel, version) -> (kind, base)` of every blob of the thread.
        keep_last: Keep the newest N checkpoints per namespace (and what they need).
        doomed: Or: delete exactly these `(cns, checkpoint_id)`.

    A kept checkpoint whose channel has no stored value at its version (a `DeltaChannel`
    step) keeps its ancestors back to the nearest one that has a value for that channel, so
    `get_delta_channel_history` still finds its seed. Blobs no kept checkpoint refers to
    (directly or as the base of a delta) are deleted.

    Returns:
        `(checkpoints to delete as (cns, id), blobs to delete as (cns, channel, version))`.
    """
    by_ns: dict[str, dict[str, CheckpointInfo]] = {}
    for cp in checkpoints:
        by_ns.setdefault(cp.cns, {})[cp.checkpoint_id] = cp
    keep: set[tuple[str, str]] = set()
    for cns, cps in by_ns.items():
        ids = sorted(cps, reverse=True)
        if doomed is not None:
            seeds = [i for i in ids if (cns, i) not in doomed]
        else:
            seeds = ids[: max(keep_last or 0, 0)]
        for cid in seeds:
            keep.add((cns, cid))
            if doomed is not None:
                continue
            cp = cps[cid]
            missing = {
                ch
                for ch, ver in cp.versions.items()
                if blobs.get((cns, ch, ver), ("e", None))[0] == "e"
            }
            parent = cp.parent_id
            while missing and parent is not None and parent in cps:
                anc = cps[parent]
                keep.add((cns, parent))
                missing = {
                    ch
                    for ch in missing
                    if ch not in anc.versions
                    or blobs.get((cns, ch, anc.versions[ch]), ("e", None))[0] == "e"
                }
                parent = anc.parent_id
    drop_cps = {(cns, cid) for cns, cps in by_ns.items() for cid in cps} - keep
    needed: set[tuple[str, str, str]] = set()
    for cns, cid in keep:
        for ch, ver in by_ns[cns][cid].versions.items():
            key: tuple[str, str, str] | None = (cns, ch, ver)
            while key is not None and key in blobs and key not in needed:
                needed.add(key)
                kind, base = blobs[key]
                key = (cns, ch, base) if kind == "d" and base is not None else None
    return drop_cps, set(blobs) - needed
