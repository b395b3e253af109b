"""Group commit of the SQLite backend: sync writers from many threads share transactions."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agentrewind_langgraph import RewindSaver


def _insert(value: int) -> Any:
    def txn(conn: sqlite3.Connection) -> int:
        conn.execute("INSERT INTO t (v) VALUES (?)", (value,))
        return value

    return txn


def _failing(conn: sqlite3.Connection) -> None:
    conn.execute("INSERT INTO t (v) VALUES (-1)")
    raise RuntimeError("this operation fails")


def _count_commits(saver: RewindSaver) -> list[int]:
    """Count the transactions the backend's write connection opens."""
    wdb = saver.backend._wdb
    opened = [0]
    begin = wdb.begin

    def counting(conn: sqlite3.Connection) -> None:
        opened[0] += 1
        begin(conn)

    wdb.begin = counting
    return opened


def test_operations_queued_while_the_lock_is_held_commit_together(tmp_path: Path) -> None:
    with RewindSaver(f"sqlite:///{tmp_path / 'g.db'}") as saver:
        backend = saver.backend
        backend.execute(lambda conn: conn.execute("CREATE TABLE t (v INTEGER)"))
        opened = _count_commits(saver)
        results: dict[int, Any] = {}
        threads = []
        with backend._lock:  # another writer's transaction is running
            for i in range(6):
                op = _failing if i == 3 else _insert(i)

                def call(i: int = i, op: Any = op) -> None:
                    try:
                        results[i] = backend.execute(op)
                    except RuntimeError as exc:
                        results[i] = exc

                threads.append(threading.Thread(target=call))
                threads[-1].start()
            deadline = time.monotonic() + 5
            while len(backend._pending) < 6 and time.monotonic() < deadline:
                time.sleep(0.001)
            assert len(backend._pending) == 6
        for t in threads:
            t.join(5)
        # The bad operation fails alone; the others are committed, each exactly once.
        assert isinstance(results.pop(3), RuntimeError)
        assert results == {i: i for i in (0, 1, 2, 4, 5)}
        with backend.db.read() as conn:
            rows = sorted(v for (v,) in conn.execute("SELECT v FROM t"))
        assert rows == [0, 1, 2, 4, 5]
        # The group stops at the failure and is rolled back; the operations it ran then get a
        # transaction each, and the two behind the failure commit together.
        assert opened[0] == 1 + 4 + 1


def test_grouped_operations_commit_in_one_transaction(tmp_path: Path) -> None:
    with RewindSaver(f"sqlite:///{tmp_path / 'g.db'}") as saver:
        backend = saver.backend
        backend.execute(lambda conn: conn.execute("CREATE TABLE t (v INTEGER)"))
        opened = _count_commits(saver)
        with backend._lock:
            threads = [
                threading.Thread(target=backend.execute, args=(_insert(i),)) for i in range(5)
            ]
            for t in threads:
                t.start()
            deadline = time.monotonic() + 5
            while len(backend._pending) < 5 and time.monotonic() < deadline:
                time.sleep(0.001)
        for t in threads:
            t.join(5)
        with backend.db.read() as conn:
            assert sorted(v for (v,) in conn.execute("SELECT v FROM t")) == [0, 1, 2, 3, 4]
        assert opened[0] == 1


@pytest.mark.parametrize("api", ["sync", "async"])
async def test_many_threads_writing_one_file_lose_nothing(tmp_path: Path, api: str) -> None:
    from langgraph.checkpoint.base.id import uuid6

    with RewindSaver(f"sqlite:///{tmp_path / 'g.db'}") as saver:

        def writer(t: int) -> None:
            cfg: Any = {"configurable": {"thread_id": f"t{t}", "checkpoint_ns": ""}}
            for i in range(20):
                cp: Any = {"v": 4, "id": str(uuid6(clock_seq=i)), "ts": "2030-01-01T00:00:00+00:00",
                           "channel_values": {"n": i}, "channel_versions": {"n": f"{i + 1:010}.0"},
                           "versions_seen": {}, "updated_channels": None}  # fmt: skip
                if api == "sync":
                    cfg = saver.put(cfg, cp, {"step": i}, {"n": f"{i + 1:010}.0"})
                    saver.put_writes(cfg, [("n", i)], task_id=f"task{i}")
                else:
                    import asyncio

                    cfg = asyncio.run(saver.aput(cfg, cp, {"step": i}, {"n": f"{i + 1:010}.0"}))
                    asyncio.run(saver.aput_writes(cfg, [("n", i)], task_id=f"task{i}"))

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        for t in range(6):
            history = list(saver.list({"configurable": {"thread_id": f"t{t}"}}))
            assert [h.metadata["step"] for h in history] == list(range(19, -1, -1))
            assert [h.checkpoint["channel_values"]["n"] for h in history] == list(range(19, -1, -1))
            assert all(h.pending_writes and h.pending_writes[0][2] == h.metadata["step"]
                       for h in history)  # fmt: skip
