"""The SQLite saver's hot path in SQL statements (sqlite3 trace callback): put, get_tuple, list."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base.id import uuid6

from agentrewind_langgraph import RewindSaver


def _cp(i: int, values: dict[str, Any], versions: dict[str, Any]) -> dict[str, Any]:
    return {"v": 4, "id": str(uuid6(clock_seq=i)), "ts": "2030-01-01T00:00:00+00:00",
            "channel_values": values, "channel_versions": dict(versions),
            "versions_seen": {}, "updated_channels": None}  # fmt: skip


class Trace:
    """Statements run on the saver's connections (write and this thread's read one)."""

    def __init__(self, saver: RewindSaver) -> None:
        self.statements: list[str] = []
        self._lock = threading.Lock()
        backend: Any = saver.backend
        self.conns = [backend._wdb.connection(), backend.db.connection()]
        for conn in self.conns:
            conn.set_trace_callback(self._add)

    def _add(self, sql: str) -> None:
        with self._lock:
            self.statements.append(" ".join(sql.split()))

    def take(self) -> list[str]:
        """The statements since the last call, BEGIN/COMMIT left out."""
        out = [s for s in self.statements if s not in ("BEGIN IMMEDIATE", "COMMIT")]
        self.statements.clear()
        return out

    def stop(self) -> None:
        for conn in self.conns:
            conn.set_trace_callback(None)


@pytest.fixture
def saver(tmp_path: Path) -> Iterator[RewindSaver]:
    with RewindSaver(f"sqlite:///{tmp_path / 'lg.db'}") as s:
        yield s


def _put(saver: RewindSaver, cfg: Any, i: int, versions: dict[str, Any], run: str = "r1") -> Any:
    versions["messages"] = saver.get_next_version(versions.get("messages"), None)
    values = {"messages": [f"m{k}" for k in range(3)], "n": i}
    versions["n"] = saver.get_next_version(versions.get("n"), None)
    md: Any = {"source": "loop", "step": i, "run_id": run}
    return saver.put(cfg, _cp(i, values, versions), md, dict(versions))  # type: ignore[arg-type]


def test_a_put_on_a_known_thread_is_the_checkpoint_and_its_values(saver: RewindSaver) -> None:
    cfg: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    versions: dict[str, Any] = {}
    trace = Trace(saver)
    cfg = _put(saver, cfg, 0, versions)
    first = trace.take()
    cfg = _put(saver, cfg, 1, versions)
    later = trace.take()
    saver.put_writes(cfg, [("n", 5)], task_id="task")
    writes = trace.take()
    trace.stop()
    # The first put of a thread and run also records the thread and the (run, thread) pair.
    assert any("lg_threads" in s for s in first)
    assert any("lg_runs" in s for s in first)
    # Later: the checkpoint (its tombstone check inside the INSERT), then one executemany of
    # its two changed values (traced once per row). No SELECT, no thread or run row.
    assert len(later) == 3, later
    assert later[0].startswith("INSERT OR REPLACE INTO lg_checkpoints")
    assert "lg_tombstones" in later[0]
    assert all(s.startswith("INSERT OR REPLACE INTO lg_blobs") for s in later[1:])
    assert len(writes) == 1 and writes[0].startswith("INSERT OR IGNORE INTO lg_writes"), writes


def test_delete_forgets_the_thread_and_late_writes_stay_ignored(saver: RewindSaver) -> None:
    cfg: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    versions: dict[str, Any] = {}
    cfg = _put(saver, cfg, 0, versions)
    late = _put(saver, cfg, 1, versions)
    saver.delete_thread("t")
    trace = Trace(saver)
    _put(saver, late, 2, dict(versions))  # continues the deleted history: refused
    saver.put_writes(late, [("n", 5)], task_id="task")
    refused = trace.take()
    assert saver.get_tuple({"configurable": {"thread_id": "t"}}) is None
    # A new history on the same id after the delete: stored, and the thread row comes back.
    trace.take()
    fresh: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    cp = _cp(9, {"n": 1}, {"n": "1"})
    cp["ts"] = "2999-01-01T00:00:00+00:00"
    saver.put(fresh, cp, {"source": "input", "step": -1, "run_id": "r2"}, {"n": "1"})  # type: ignore[arg-type]
    again = trace.take()
    trace.stop()
    assert any("SELECT deleted_at FROM lg_tombstones" in s for s in refused)
    assert any("DELETE FROM lg_tombstones" in s for s in again)
    assert any("lg_threads" in s for s in again) and any("lg_runs" in s for s in again)
    got = saver.get_tuple({"configurable": {"thread_id": "t"}})
    assert got is not None and got.checkpoint["channel_values"] == {"n": 1}
    assert [t for t, *_ in saver.backend.list_threads(10, 0.0)] == ["t"]


def test_a_failed_batch_teaches_the_saver_nothing(saver: RewindSaver) -> None:
    backend: Any = saver.backend

    def boom(conn: sqlite3.Connection) -> None:
        raise RuntimeError("rolled back")

    cfg: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    versions: dict[str, Any] = {}
    _, _, op = saver._put_op(cfg, _cp(0, {"n": 1}, {"n": "1"}), {"run_id": "r"}, {"n": "1"})  # type: ignore[arg-type]

    def both(conn: sqlite3.Connection) -> None:
        op(conn)
        boom(conn)

    with pytest.raises(RuntimeError):
        backend.execute(both)
    assert backend._touched == {} and backend._known_runs == set()
    _put(saver, cfg, 1, versions, run="r")
    assert "t" in backend._touched and ("r", "t") in backend._known_runs
    with sqlite3.connect(backend.db.path) as conn:
        assert conn.execute("SELECT count(*) FROM lg_runs").fetchone() == (1,)


def test_get_tuple_latest_is_two_statements_with_writes_in_order(saver: RewindSaver) -> None:
    cfg: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    versions: dict[str, Any] = {}
    for i in range(5):
        cfg = _put(saver, cfg, i, versions)
    saver.put_writes(cfg, [("n", 2), ("messages", ["b"])], task_id="b", task_path="~2")
    saver.put_writes(cfg, [("n", 1)], task_id="a", task_path="~1")
    trace = Trace(saver)
    got = saver.get_tuple({"configurable": {"thread_id": "t"}})
    statements = trace.take()
    trace.stop()
    assert len(statements) == 2, statements
    assert got is not None
    assert got.config["configurable"]["checkpoint_id"] == cfg["configurable"]["checkpoint_id"]
    assert got.checkpoint["channel_values"] == {"messages": ["m0", "m1", "m2"], "n": 4}
    assert got.pending_writes == [("a", "n", 1), ("b", "n", 2), ("b", "messages", ["b"])]
    by_id = saver.get_tuple(cfg)
    assert by_id is not None and by_id.checkpoint == got.checkpoint
    missing: Any = {"configurable": {"thread_id": "t", "checkpoint_id": "nope"}}
    assert saver.get_tuple(missing) is None


def test_list_newest_across_threads_reads_the_id_index(saver: RewindSaver) -> None:
    versions: dict[str, dict[str, Any]] = {}
    last = {}
    for i in range(60):
        tid = f"t{i % 20}"
        cfg: Any = last.get(tid, {"configurable": {"thread_id": tid, "checkpoint_ns": ""}})
        last[tid] = _put(saver, cfg, i, versions.setdefault(tid, {}))
    ids = [c.config["configurable"]["checkpoint_id"] for c in saver.list(None, limit=10)]
    everything = sorted(
        (c.config["configurable"]["checkpoint_id"] for c in saver.list(None)), reverse=True
    )
    assert ids == everything[:10]
    backend: Any = saver.backend
    with backend.db.read() as conn:
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT checkpoint_id FROM lg_checkpoints c WHERE c.ns = ? "
            "ORDER BY c.checkpoint_id DESC LIMIT 10",
            (backend.ns,),
        ).fetchall()
    assert any("lg_checkpoints_id" in row[3] for row in plan), plan
    assert not any("TEMP B-TREE" in row[3] for row in plan), plan
    # Within one thread the primary key is still the path (never the namespace-wide index).
    one = [c.config["configurable"]["checkpoint_id"] for c in saver.list(last["t3"], limit=2)]
    assert len(one) == 1
    thread: Any = {"configurable": {"thread_id": "t3"}}
    assert len(list(saver.list(thread))) == 3
