"""Loading a checkpoint never runs code; thread ids of any shape keep one Cluster slot.

On old main `RewindSaver` used LangGraph's permissive `JsonPlusSerializer`: a blob naming
`os.system` (or any module function) was imported and called on `get_tuple`.
"""

from __future__ import annotations

import dataclasses
import sys
import uuid
from pathlib import Path
from typing import Any

import ormsgpack
import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from agentrewind.errors import SerializationError
from agentrewind_langgraph import RewindSaver, UnsafeCheckpointError
from redis_support import cleanup_redis

CALLS: list[Any] = []


def record_call(arg: Any) -> str:
    """A module function a crafted blob names: it must never run."""
    CALLS.append(arg)
    return "ran"


@dataclasses.dataclass
class Point:
    x: int
    y: int


def _ext(code: int, module: str, name: str, arg: Any) -> ormsgpack.Ext:
    return ormsgpack.Ext(code, ormsgpack.packb((module, name, arg)))


class _Crafting(JsonPlusSerializer):
    """Writes `payloads[value]` as the stored bytes of a marker value: an attacker's blob."""

    def __init__(self, payloads: dict[str, bytes]) -> None:
        super().__init__()
        self.payloads = payloads

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        if isinstance(obj, str) and obj in self.payloads:
            return "msgpack", self.payloads[obj]
        return super().dumps_typed(obj)


def _cp(values: dict[str, Any]) -> dict[str, Any]:
    from langgraph.checkpoint.base.id import uuid6

    return {
        "v": 4,
        "id": str(uuid6()),
        "ts": "2030-01-01T00:00:00+00:00",
        "channel_values": values,
        "channel_versions": {k: "1" for k in values},
        "versions_seen": {},
        "updated_channels": None,
    }


def _store(url: str, serde: Any, values: dict[str, Any], thread: str = "t") -> dict[str, Any]:
    with RewindSaver(url, serde=serde) as saver:
        config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        return saver.put(config, _cp(values), {"step": 0}, {k: "1" for k in values})


@pytest.mark.parametrize(
    ("module", "name", "code"),
    [("os", "system", 1), (__name__, "record_call", 0), (__name__, "record_call", 2)],
)
def test_crafted_blob_naming_a_function_is_refused_and_not_run(
    saver_url: str, tmp_path: Path, module: str, name: str, code: int
) -> None:
    marker = tmp_path / "pwned"
    arg: Any = f"touch {marker}" if module == "os" else "x"
    if code == 1:
        arg = [arg]
    elif code == 2:
        arg = {"arg": arg}
    blob = ormsgpack.packb({"ok": 1, "evil": _ext(code, module, name, arg)})
    config = _store(saver_url, _Crafting({"PAYLOAD": blob}), {"state": "PAYLOAD"})
    CALLS.clear()
    with RewindSaver(saver_url) as saver:
        with pytest.raises(UnsafeCheckpointError) as info:
            saver.get_tuple(config)
        with pytest.raises(SerializationError, match=f"allowed_msgpack_modules=\\[\\({module!r}"):
            list(saver.list(config))
    assert info.value.type_name == f"{module}.{name}"
    assert not marker.exists() and CALLS == []


def test_pickle_blob_is_refused(saver_url: str) -> None:
    class _Pickling(JsonPlusSerializer):
        def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
            return (
                ("pickle", b"cos\nsystem\n(S'true'\ntR.")
                if obj == "P"
                else super().dumps_typed(obj)
            )

    config = _store(saver_url, _Pickling(), {"state": "P"})
    with RewindSaver(saver_url) as saver, pytest.raises(UnsafeCheckpointError, match="pickle"):
        saver.get_tuple(config)


def test_langgraph_safe_types_load_and_more_are_allowed_by_option(saver_url: str) -> None:
    import datetime as dt

    from langchain_core.messages import AIMessage, HumanMessage

    state = {"msgs": [HumanMessage("hi", id="1"), AIMessage("yo", id="2")],
             "when": dt.datetime(2030, 1, 2), "point": Point(1, 2)}  # fmt: skip
    config = _store(saver_url, JsonPlusSerializer(), state)
    with RewindSaver(saver_url) as saver, pytest.raises(UnsafeCheckpointError, match="Point"):
        saver.get_tuple(config)
    with RewindSaver(saver_url, allowed_msgpack_modules=[Point]) as saver:
        tup = saver.get_tuple(config)
        assert tup is not None
        assert tup.checkpoint["channel_values"] == state
    assert sys.modules[__name__].CALLS == []


@pytest.mark.parametrize("thread_id", ["}", "", "{x}", "a}:lg:{b"])
def test_any_thread_id_on_every_store(saver_url_with_cluster: str, thread_id: str) -> None:
    url = saver_url_with_cluster
    with RewindSaver(url) as saver:
        config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        stored = saver.put(config, _cp({"x": 1}), {"step": 0}, {"x": "1"})
        saver.put_writes(stored, [("x", 2)], "task", "")
        tup = saver.get_tuple(config)
        assert tup is not None and tup.checkpoint["channel_values"] == {"x": 1}
        assert [w[1:] for w in tup.pending_writes or []] == [("x", 2)]
        saver.delete_thread(thread_id)
        assert saver.get_tuple(config) is None


def test_threads_of_colliding_namespaces_are_isolated(redis_url: str) -> None:
    ns = f"lg-{uuid.uuid4().hex[:6]}"
    a_url, b_url = f"{redis_url}?namespace={ns}", f"{redis_url}?namespace={ns}:lg:{{x}}"
    try:
        _store(a_url, None, {"secret": 1}, thread="x}:lg:{y")
        with RewindSaver(b_url) as b:
            assert b.get_tuple({"configurable": {"thread_id": "y", "checkpoint_ns": ""}}) is None
    finally:  # both namespaces: `ns` and its percent-encoded sibling `ns%3Alg%3A%7Bx%7D`
        cleanup_redis(redis_url, ns)
        cleanup_redis(redis_url, f"{ns}%3Alg%3A%7Bx%7D")


def test_saver_threads_of_the_old_key_layout_are_migrated(redis_url: str) -> None:
    import redis

    from agentrewind.errors import SchemaVersionError

    prefix, ns, tid = f"lgm{uuid.uuid4().hex[:6]}", "tenant", "t}1"
    url = f"{redis_url}?prefix={prefix}&namespace={ns}"
    config = _store(url, None, {"x": 1}, thread=tid)
    client = redis.Redis.from_url(redis_url)
    with RewindSaver(url) as saver:  # rename its keys to agentrewind 0.1's layout
        base = saver.store.key_base("lg", tid)  # type: ignore[attr-defined]
    for part in ("cp", "ix", "bl", "wr", "wx", "th", "tomb"):
        if client.exists(f"{base}:{part}"):
            client.rename(f"{base}:{part}", f"{prefix}:{ns}:lg:{{{tid}}}:{part}")
    client.delete(f"{prefix}:{ns}:layout")
    try:
        with pytest.raises(SchemaVersionError, match="migrate"):
            RewindSaver(url)
        with RewindSaver(url + "&migrate=1") as saver:
            tup = saver.get_tuple(config)
            assert tup is not None and tup.checkpoint["channel_values"] == {"x": 1}
            assert [t for t, *_ in saver.backend.list_threads(10, 0.0)] == [tid]
    finally:
        keys = list(client.scan_iter(match=f"{prefix}:*"))
        if keys:
            client.delete(*keys)
        client.close()
