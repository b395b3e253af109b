"""What RewindSaver stores: pending-write order, tombstones, list deltas, retention, TTL."""

from __future__ import annotations

import operator
import sqlite3
import time
import uuid
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import writes_sort_key
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from agentrewind_langgraph import RewindSaver
from agentrewind_langgraph._codec import assemble_blob


def _cp(i: int, values: dict[str, Any], versions: dict[str, Any]) -> dict[str, Any]:
    from langgraph.checkpoint.base.id import uuid6

    return {
        "v": 4,
        "id": str(uuid6(clock_seq=i)),
        "ts": "2030-01-01T00:00:00+00:00",
        "channel_values": values,
        "channel_versions": versions,
        "versions_seen": {},
        "updated_channels": None,
    }


def test_pending_writes_come_back_in_writes_sort_key_order(saver_url: str) -> None:
    with RewindSaver(saver_url) as saver:
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        stored = saver.put(config, _cp(0, {}, {}), {"step": 0}, {})
        saver.put_writes(stored, [("b", 1), ("a", 2)], "task-z", "~2")
        saver.put_writes(stored, [("c", 3)], "task-a", "~10")
        saver.put_writes(stored, [("__error__", "x"), ("d", 4)], "task-m", "~1")
        saver.put_writes(stored, [("b", 99)], "task-z", "~2")  # regular writes: first wins
        tup = saver.get_tuple(stored)
        assert tup is not None and tup.pending_writes is not None
        keys = [("~2", "task-z", 0), ("~2", "task-z", 1), ("~10", "task-a", 0),
                ("~1", "task-m", -1), ("~1", "task-m", 1)]  # fmt: skip
        expected = [k for k in sorted(keys, key=lambda k: writes_sort_key(*k))]
        got = [(t, c, v) for t, c, v in tup.pending_writes]
        values = {("task-z", 0): ("b", 1), ("task-z", 1): ("a", 2), ("task-a", 0): ("c", 3),
                  ("task-m", -1): ("__error__", "x"), ("task-m", 1): ("d", 4)}  # fmt: skip
        assert got == [(t, *values[(t, i)]) for _, t, i in expected]


def test_late_writes_after_delete_thread_do_not_resurrect(saver_url: str) -> None:
    with RewindSaver(saver_url) as saver:
        config = {"configurable": {"thread_id": "gone", "checkpoint_ns": ""}}
        first = saver.put(config, _cp(0, {"x": 1}, {"x": "1"}), {"step": 0}, {"x": "1"})
        old_cp = _cp(1, {"x": 2}, {"x": "2"})
        old_cp["ts"] = "2000-01-01T00:00:00+00:00"  # created before the delete
        saver.delete_thread("gone")
        saver.put(first, old_cp, {"step": 1}, {"x": "2"})  # an in-flight put arriving late
        saver.put_writes(first, [("x", 3)], "task")  # a late task result
        assert saver.get_tuple(config) is None
        assert list(saver.list(config)) == []
        # A new run on the same thread id starts fresh and is stored.
        fresh = saver.put(config, _cp(2, {"x": 9}, {"x": "9"}), {"step": 0}, {"x": "9"})
        tup = saver.get_tuple(config)
        assert tup is not None and tup.config == fresh
        assert tup.checkpoint["channel_values"] == {"x": 9}


def test_only_changed_channels_are_stored(saver_url: str) -> None:
    with RewindSaver(saver_url) as saver:
        big = [f"message {i} " + "x" * 100 for i in range(1000)]
        config: dict[str, Any] = {"configurable": {"thread_id": "big", "checkpoint_ns": ""}}
        versions = {"messages": "1", "counter": "1"}
        config = saver.put(config, _cp(0, {"messages": big, "counter": 0}, versions), {}, versions)
        for i in range(1, 6):
            versions = {**versions, "counter": str(i + 1)}
            config = saver.put(
                config,
                _cp(i, {"messages": big, "counter": i}, versions),
                {},
                {"counter": versions["counter"]},
            )
        blobs = saver.backend.blob_values("big", "", [("messages", "1")])
        assert set(blobs) == {("messages", "1")}
        tup = saver.get_tuple(config)
        assert tup is not None
        assert tup.checkpoint["channel_values"] == {"messages": big, "counter": 5}
        if saver.store.scheme == "sqlite":
            with saver.store.db.read() as conn:
                n = conn.execute(
                    "SELECT count(*) FROM lg_blobs WHERE channel='messages'"
                ).fetchone()
            assert n[0] == 1


class Chat(TypedDict):
    messages: Annotated[list, add_messages]


def _chat_graph() -> StateGraph:
    b = StateGraph(Chat)
    b.add_node("bot", lambda s: {"messages": [AIMessage(content="answer " + "y" * 110)]})
    b.add_edge(START, "bot")
    b.add_edge("bot", END)
    return b


def test_growing_message_list_is_stored_linearly_and_reads_back(saver_url: str) -> None:
    config = {"configurable": {"thread_id": "chat"}}
    with RewindSaver(saver_url) as saver:
        graph = _chat_graph().compile(checkpointer=saver)
        for turn in range(60):
            graph.invoke({"messages": [HumanMessage(content=f"q{turn} " + "z" * 110)]}, config)
        values = graph.get_state(config).values
        assert len(values["messages"]) == 120
        assert values["messages"][0].content.startswith("q0")
        reference = _chat_graph().compile(checkpointer=InMemorySaver())
        for turn in range(60):
            reference.invoke({"messages": [HumanMessage(content=f"q{turn} " + "z" * 110)]}, config)
        mine = [m.content for m in values["messages"]]
        assert mine == [m.content for m in reference.get_state(config).values["messages"]]
        # Every earlier state reads back whole too.
        for state in list(graph.get_state_history(config))[::17]:
            assert len(state.values.get("messages", [])) in range(0, 121)
        # Stored message bytes stay within a small multiple of one copy of the list.
        kinds = _blob_kinds(saver, "chat", "messages")
        assert kinds.count("d") > kinds.count("f") * 3
        total = _blob_bytes(saver, "chat", "messages")
        one_copy = len(saver.serde.dumps_typed(values["messages"])[1])
        assert total < 4 * one_copy


def _blob_kinds(saver: RewindSaver, thread: str, channel: str) -> list[str]:
    return [kind for kind, _ in _stored_blobs(saver, thread, channel)]


def _blob_bytes(saver: RewindSaver, thread: str, channel: str) -> int:
    return sum(size for _, size in _stored_blobs(saver, thread, channel))


def _stored_blobs(saver: RewindSaver, thread: str, channel: str) -> list[tuple[str, int]]:
    """`(kind, stored bytes)` of each stored value of `channel`, read straight from the store."""
    if saver.store.scheme == "sqlite":
        with saver.store.db.read() as conn:
            rows = conn.execute(
                "SELECT kind, coalesce(length(value), 0) FROM lg_blobs"
                " WHERE thread_id = ? AND channel = ?",
                (thread, channel),
            ).fetchall()
        return [(str(kind), int(size)) for kind, size in rows]
    if saver.store.scheme == "postgresql":
        rows = saver.store.db.fetchall(
            saver.store.render(
                "SELECT kind, coalesce(length(value), 0) FROM {s}.lg_blobs"
                " WHERE ns = %s AND thread_id = %s AND channel = %s"
            ),
            (saver.store.namespace, thread, channel),
        )
        return [(str(kind), int(size)) for kind, size in rows]
    raw = saver.backend.client.hgetall(saver.backend._keys(thread)[2])
    return [
        (v[:1].decode(), len(v)) for k, v in raw.items() if k.split(b"\0")[1] == channel.encode()
    ]


def test_assemble_blob_refuses_a_broken_chain() -> None:
    assert assemble_blob([("d", 1, "msgpack", b"\x01")]) is None
    assert assemble_blob([("e", 0, "empty", b"")]) is None


def _extend(state: list[str], writes: list[list[str]]) -> list[str]:
    return [*state, *(x for w in writes for x in w)]


class DeltaState(TypedDict):
    items: Annotated[list[str], DeltaChannel(_extend, snapshot_frequency=4)]
    n: int


def _delta_graph() -> StateGraph:
    b = StateGraph(DeltaState)
    b.add_node("add", lambda s: {"items": [f"i{s.get('n', 0)}"], "n": s.get("n", 0) + 1})
    b.add_edge(START, "add")
    b.add_edge("add", END)
    return b


def test_prune_keep_last_stays_correct_with_delta_channel(saver_url: str) -> None:
    config = {"configurable": {"thread_id": "delta"}}
    with RewindSaver(saver_url) as saver:
        graph = _delta_graph().compile(checkpointer=saver)
        for _ in range(11):
            graph.invoke({"items": []}, config)
        before = graph.get_state(config).values
        assert len(before["items"]) == 11
        count = len(list(saver.list(config)))
        saver.prune(["delta"], keep_last=2)
        after = len(list(saver.list(config)))
        assert 2 <= after < count
        assert graph.get_state(config).values == before
        graph.invoke({"items": []}, config)
        assert graph.get_state(config).values["items"] == [*before["items"], "i11"]
        # prune() with no ids covers every thread; "delete" removes them.
        saver.prune(strategy="delete")
        assert saver.get_tuple(config) is None


def test_ttl_is_set_and_refreshed_on_write(saver_url: str) -> None:
    with RewindSaver(saver_url, ttl=60) as saver:
        graph = _chat_graph().compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "ttl"}}
        graph.invoke({"messages": [HumanMessage(content="hi")]}, config)
        if saver.store.scheme == "redis":
            keys = saver.backend._keys("ttl")[:6]
            ttls = [saver.backend.client.pttl(k) for k in keys]
            assert all(50_000 < t <= 60_000 for t in ttls if t != -2)
            assert saver.backend.client.pttl(keys[0]) > 50_000
        else:
            (_, _, updated, expires) = saver.backend.list_threads(10, time.time())[0]
            assert expires is not None and abs(expires - updated - 60) < 1e-6
    with RewindSaver(saver_url, ttl=0.3) as saver:
        graph = _chat_graph().compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "short"}}
        graph.invoke({"messages": [HumanMessage(content="hi")]}, config)
        assert saver.get_tuple(config) is not None
        time.sleep(0.5)
        assert saver.get_tuple(config) is None
        saver.purge_expired()
        assert "short" not in saver.backend.thread_ids()


def test_another_connection_holding_the_write_lock_6s_causes_no_failure(tmp_path: Any) -> None:
    path = tmp_path / "locked.db"
    with RewindSaver(f"sqlite:///{path}") as saver:
        graph = _chat_graph().compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "lock"}}
        graph.invoke({"messages": [HumanMessage(content="one")]}, config)
        other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")  # e.g. a backup, VACUUM or manual prune
        import threading

        release = threading.Timer(6.0, lambda: other.execute("COMMIT"))
        release.start()
        start = time.monotonic()
        out = graph.invoke({"messages": [HumanMessage(content="two")]}, config)
        waited = time.monotonic() - start
        release.join()
        other.close()
        assert waited >= 5.5
        assert [m.content for m in out["messages"]][-2:][0] == "two"
        assert len(graph.get_state(config).values["messages"]) == 4


def test_thread_ids_are_namespaced(saver_url: str) -> None:
    with (
        RewindSaver(saver_url) as a,
        RewindSaver(
            saver_url
            + ("&" if "?" in saver_url else "?")
            + "namespace=other-"
            + uuid.uuid4().hex[:6]
        ) as b,
    ):
        cfg = {"configurable": {"thread_id": "same", "checkpoint_ns": ""}}
        a.put(cfg, _cp(0, {}, {}), {}, {})
        assert b.get_tuple(cfg) is None
        b.delete_thread("same")
        assert a.get_tuple(cfg) is not None
        b.close()


class Turns(TypedDict):
    messages: Annotated[list[str], operator.add]


def _stored_bytes(saver: RewindSaver, thread: str) -> int:
    """Bytes a thread holds: row payloads on SQLite, `MEMORY USAGE` of its keys on Redis, row
    sizes on PostgreSQL."""
    if saver.store.scheme == "sqlite":
        with saver.store.db.read() as conn:
            total = 0
            for table in ("lg_checkpoints", "lg_blobs", "lg_writes"):
                cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
                expr = " + ".join(f"ifnull(length({c}), 0)" for c in cols)
                row = conn.execute(
                    f"SELECT sum({expr}) FROM {table} WHERE thread_id = ?", (thread,)
                ).fetchone()
                total += int(row[0] or 0)
        return total
    if saver.store.scheme == "postgresql":  # row sizes as stored (after TOAST compression)
        total = 0
        for table in ("lg_checkpoints", "lg_blobs", "lg_writes"):
            row = saver.store.db.fetchone(
                saver.store.render(
                    f"SELECT sum(pg_column_size(t.*)) FROM {{s}}.{table} t"
                    " WHERE ns = %s AND thread_id = %s"
                ),
                (saver.store.namespace, thread),
            )
            total += int(row[0] or 0)
        return total
    client = saver.backend.client
    return sum(int(client.memory_usage(k, samples=0) or 0) for k in saver.backend._keys(thread))


def test_200_turns_of_a_growing_message_list_grow_storage_linearly(
    saver_url: str, record_property: Any
) -> None:
    builder = StateGraph(Turns)
    builder.add_node("chat", lambda s: {"messages": ["u" * 120, "a" * 120]})
    builder.add_edge(START, "chat")
    builder.add_edge("chat", END)
    config = {"configurable": {"thread_id": "turns"}}
    sizes: dict[int, int] = {}
    with RewindSaver(saver_url) as saver:
        graph = builder.compile(checkpointer=saver)
        for turn in range(1, 201):
            graph.invoke({"messages": []}, config)
            if turn % 50 == 0:
                sizes[turn] = _stored_bytes(saver, "turns")
        assert len(graph.get_state(config).values["messages"]) == 400
    record_property("stored_bytes_by_turn", sizes)
    print(f"{saver_url.split(':')[0]}: stored bytes by turn {sizes}")
    # Re-storing the whole list each turn (quadratic) would give 16x from turn 50 to 200;
    # linear growth gives 4x (full copies when the list doubles add a bounded share).
    assert sizes[200] <= 4.6 * sizes[50], sizes
    steps = [sizes[t + 50] - sizes[t] for t in (50, 100, 150)]
    assert max(steps) <= 1.6 * min(steps), sizes
    assert sizes[200] < 1_000_000, sizes
