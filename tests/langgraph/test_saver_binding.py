"""An encrypting RewindSaver's ciphertexts are bound to their thread, checkpoint and channel.

Someone who can write the store but has no key (a shared Redis, a DBA, a restored backup)
plants a stored checkpoint, channel value or pending write of one thread at another place
through the backend's own writes (no serde, no key): reading it there is a
`DecryptionError`, never another thread's state. (Before, values were bound to the store
namespace only: the planted copy read back as the other place's value.) `copy_thread`
re-seals every value for the new thread with the key, and refuses without it.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

pytest.importorskip("cryptography")

from agentrewind.errors import DecryptionError
from agentrewind.serde.encryption import Encryption, generate_key
from agentrewind_langgraph import RewindSaver
from agentrewind_langgraph._codec import BlobRow, PutRow, RawTuple, WriteRow
from agentrewind_langgraph._rows import query_args


def _cfg(thread: str, checkpoint_id: str | None = None) -> Any:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _cp(i: int, log: list[str]) -> Any:
    from langgraph.checkpoint.base.id import uuid6

    return {
        "v": 1, "id": str(uuid6(clock_seq=i)), "ts": "2026-11-29T00:00:00+00:00",
        "channel_values": {"log": log, "who": f"v{i}"},
        "channel_versions": {"log": f"{i:032}.0.1", "who": f"{i:032}.0.2"},
        "versions_seen": {}, "updated_channels": None,
    }  # fmt: skip


def _record(saver: RewindSaver, thread: str, i: int, log: list[str]) -> str:
    cp = _cp(i, log)
    config = saver.put(_cfg(thread), cp, {"step": i}, dict(cp["channel_versions"]))
    saver.put_writes(config, [("log", [f"pending {thread}"])], "task-1")
    return str(cp["id"])


def _raw(saver: RewindSaver, thread: str) -> RawTuple:
    args = query_args(_cfg(thread), None, None, 1, True)
    return next(iter(saver.backend.query(**args)))  # type: ignore[attr-defined]


def _plant(
    saver: RewindSaver, raw: RawTuple, thread: str, checkpoint_id: str, **moved: Any
) -> None:
    """Write `raw`'s stored bytes at another place through the backend (no serde, no key)."""
    blobs = [
        BlobRow(ch, raw.versions[ch], "f", None, 0, typ, data)
        for ch, (typ, data) in raw.values.items()
    ]
    row = PutRow(
        thread, raw.cns, checkpoint_id, None, None, raw.cp_type, raw.checkpoint, raw.versions,
        raw.md_text, raw.md_type, raw.md_blob, time.time(), blobs,
    )  # fmt: skip
    backend: Any = saver.backend
    backend.execute(backend.put_op(row, time.time(), None))
    writes = [WriteRow(task, 0, "", ch, typ, val) for task, ch, typ, val in raw.writes]
    backend.execute(
        backend.put_writes_op(thread, raw.cns, checkpoint_id, writes, time.time(), None)
    )


def test_a_ciphertext_planted_at_another_place_is_refused(saver_url: str) -> None:
    with RewindSaver(saver_url, encryption=Encryption(generate_key())) as saver:
        x = _record(saver, "x", 1, ["x's secret"])
        _record(saver, "y", 2, ["y's own"])
        raw = _raw(saver, "x")
        assert saver.get_tuple(_cfg("x")).checkpoint["channel_values"]["log"] == ["x's secret"]  # type: ignore[union-attr]
        # x's latest checkpoint, values and writes, planted in thread y under x's own id
        _plant(saver, raw, "y", x)
        with pytest.raises(DecryptionError, match="another place"):
            saver.get_tuple(_cfg("y", x))
        # ... in thread x again, under another checkpoint id
        other = str(_cp(3, [])["id"])
        _plant(saver, raw, "x", other)
        with pytest.raises(DecryptionError, match="another place"):
            saver.get_tuple(_cfg("x", other))
        # ... and x's "log" value alone, as the "who" value (a new version) of a checkpoint y
        # wrote itself: the checkpoint opens, that one value does not
        cp4 = _cp(4, ["y's fourth"])
        saver.put(_cfg("y"), cp4, {"step": 4}, dict(cp4["channel_versions"]))
        y_raw = _raw(saver, "y")
        assert y_raw.checkpoint_id == cp4["id"]
        fields = {f: getattr(y_raw, f) for f in RawTuple.__slots__}  # type: ignore[attr-defined]
        fields["values"] = {"who": raw.values["log"]}
        fields["versions"] = {**y_raw.versions, "who": "9" * 32}
        fields["writes"] = []
        _plant(saver, RawTuple(**fields), "y", str(cp4["id"]))
        with pytest.raises(DecryptionError, match="field 'who'"):
            saver.get_tuple(_cfg("y", str(cp4["id"])))
        # what was stored at its own place still reads
        assert saver.get_tuple(_cfg("x", x)).checkpoint["channel_values"]["log"] == ["x's secret"]  # type: ignore[union-attr]


def test_copy_thread_reseals_with_the_key_and_refuses_without_it(saver_url: str) -> None:
    with RewindSaver(saver_url, encryption=Encryption(generate_key())) as saver:
        first = _record(saver, "src", 1, ["a"])
        cp = _cp(2, ["a", "b"])
        saver.put(_cfg("src", first), cp, {"step": 2}, dict(cp["channel_versions"]))
        saver.copy_thread("src", "dst")
        src = list(saver.list(_cfg("src")))
        dst = list(saver.list(_cfg("dst")))
        assert [t.checkpoint["id"] for t in dst] == [t.checkpoint["id"] for t in src]
        assert [t.checkpoint["channel_values"] for t in dst] == [
            t.checkpoint["channel_values"] for t in src
        ]
        assert [t.metadata["step"] for t in dst] == [2, 1]
        assert dst[1].pending_writes == [("task-1", "log", ["pending src"])]
        assert dst[0].parent_config["configurable"]["checkpoint_id"] == first  # type: ignore[index]
        with RewindSaver(saver_url, encryption=False) as keyless:
            with pytest.raises(DecryptionError, match="thread 'src' is encrypted"):
                keyless.copy_thread("src", "stolen")
            assert (
                list(keyless.backend.query(**query_args(_cfg("stolen"), None, None, None, False)))
                == []
            )  # type: ignore[attr-defined]
