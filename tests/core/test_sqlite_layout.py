"""The SQLite store's layout: V1 files migrate forward intact, and what one journal write costs."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

import agentrewind
from agentrewind import RunMetrics, SQLiteStore, StepRecord
from agentrewind.stores import _sql

NS = "default"


def _record(run_id: str, i: int, *, status: str = "completed") -> StepRecord:
    return StepRecord(
        run_id=run_id, step_id=f"{run_id}-s{i}", key=f"custom:work:{i:06x}#0", kind="custom",
        name="work", status=status, seq=i + 1, parent_id=None if i == 0 else f"{run_id}-s{i - 1}",
        output={"answer": i, "text": "x" * (i % 7) * 300}, meta={"duration": 0.001 * i},
        created_at=1_700_000_000.0 + i, updated_at=1_700_000_000.5 + i,
    )  # fmt: skip


def _v1_file(path: Path, runs: dict[str, int]) -> None:
    """A store as main's code (schema version 1) leaves it: V1's DDL, rows as its writes make."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    for statement in _sql.V1:
        conn.execute(statement)
    conn.execute("CREATE TABLE ar_schema_version (version INTEGER NOT NULL)")
    conn.execute("INSERT INTO ar_schema_version VALUES (1)")
    base = time.time() - 100
    for n, (run_id, steps) in enumerate(runs.items()):
        ttl = 3600.0 if n == 0 else None
        conn.execute(_sql.UPSERT_RUN, (NS, run_id, "running", base + n, ttl))
        for i in range(steps):
            r = _record(run_id, i, status="started" if i == steps - 1 else "completed")
            conn.execute(_sql.UPSERT_STEP, (NS, run_id, r.key, r.step_id, r.seq, r.encode()))
        conn.execute(_sql.SET_HEAD, (NS, run_id, "main", f"{run_id}-s{steps - 1}"))
    conn.execute(_sql.END_RUN, (NS, "done", "completed", '{"steps": 3}', base + 50))
    conn.execute(_sql.SET_LEASE, (NS, "held", "someone-else", 4_000_000_000.0))
    conn.close()


def test_a_v1_file_migrates_forward_with_every_run_and_step(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    runs = {"ttl": 3, "done": 5, "held": 1, "long": 2_500}  # "long" opens from the index
    _v1_file(path, runs)
    conn = sqlite3.connect(path)
    before_runs = conn.execute("SELECT * FROM ar_runs ORDER BY run_id").fetchall()
    before_steps = conn.execute("SELECT * FROM ar_steps ORDER BY run_id, key").fetchall()
    before_rest = conn.execute(
        "SELECT * FROM ar_heads UNION ALL SELECT * FROM ar_leases"
    ).fetchall()
    conn.close()

    store = SQLiteStore(path)
    try:
        conn = sqlite3.connect(path)
        assert conn.execute("SELECT version FROM ar_schema_version").fetchall() == [(2,)]
        assert conn.execute("SELECT * FROM ar_runs ORDER BY run_id").fetchall() == before_runs
        assert (
            conn.execute("SELECT * FROM ar_steps ORDER BY run_id, key").fetchall() == before_steps
        )
        rest = conn.execute("SELECT * FROM ar_heads UNION ALL SELECT * FROM ar_leases").fetchall()
        assert rest == before_rest
        indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert "ar_steps_seq" not in indexes and "ar_steps_id" in indexes
        conn.close()

        assert [r.run_id for r in store.list_runs()] == ["done", "long", "held", "ttl"]
        info = store.get_run("ttl")
        assert info is not None and info.expires_at == info.updated_at + 3600.0
        done = store.get_run("done")
        assert done is not None and done.status == "completed" and done.metrics.steps == 3
        assert store.acquire_lease("held", "me", 5).acquired is False
        for run_id, steps in runs.items():
            expected = [_record(run_id, i) for i in range(steps)]
            expected[-1].status = "started"
            assert store.load_steps(run_id) == expected
            assert store.get_step(run_id, f"{run_id}-s{steps - 1}") == expected[-1]
            assert store.get_heads(run_id) == {"main": f"{run_id}-s{steps - 1}"}
    finally:
        store.close()

    # The migrated file opens: from the index (2,500 steps) and decoded (5 steps).
    mw = agentrewind.Middleware(f"sqlite:///{path}")
    try:
        for run_id, indexed in (("long", True), ("done", False)):
            with mw.run(run_id, on_incomplete="skip") as run:
                assert run._indexed is indexed
                assert run.next_seq() == runs[run_id] + 1  # the last step was found
                assert [r.step_id for r in run.records()] == [
                    f"{run_id}-s{i}" for i in range(runs[run_id])
                ]
    finally:
        mw.close()


def test_a_newer_schema_version_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "newer.db"
    SQLiteStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE ar_schema_version SET version = ?", (_sql.SCHEMA_VERSION + 1,))
    conn.commit()
    dump = list(conn.iterdump())
    with pytest.raises(agentrewind.SchemaVersionError, match="upgrade agentrewind"):
        SQLiteStore(path)
    assert list(conn.iterdump()) == dump
    conn.close()


def _wal_frames(store: SQLiteStore) -> int:
    return int(store.db.connection().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1])


def test_a_journal_step_writes_few_wal_pages(tmp_path: Path) -> None:
    """A started + completed pair rewrites about 2 pages per write (main's layout wrote 6)."""
    store = SQLiteStore(tmp_path / "pages.db")
    try:
        for n in range(20):  # other runs in the namespace, as in any real store
            store.begin_run(f"other-{n}")
        store.begin_run("r")
        conn = store.db.connection()
        conn.execute("PRAGMA wal_autocheckpoint=0")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        steps = 300
        for i in range(steps):
            store.put_step(_record("r", i, status="started"))
            store.put_step(_record("r", i))
        per_write = _wal_frames(store) / (2 * steps)
        assert per_write < 3.0, per_write  # main's layout and writes: 5.9 here
        assert len(store.load_steps("r")) == steps
    finally:
        store.close()


def test_throttled_touch_keeps_list_order_exact_and_updated_at_fresh(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "touch.db")
    try:
        store.begin_run("a")
        store.begin_run("b")
        first = store.get_run("b")
        assert first is not None
        store.put_step(_record("b", 0))  # b is the newest run: its row may stay as it is
        again = store.get_run("b")
        assert again is not None and again.updated_at == first.updated_at
        store.put_step(_record("a", 0))  # a is not: it is touched, and listed first
        assert [r.run_id for r in store.list_runs()] == ["a", "b"]
        time.sleep(0.15)  # past the interval, a write refreshes updated_at (and the TTL clock)
        before = store.get_run("a")
        store.put_step(_record("a", 1))
        after = store.get_run("a")
        assert before is not None and after is not None
        assert after.updated_at - before.updated_at >= 0.15
        store.end_run("b", "completed", RunMetrics())
        assert [r.run_id for r in store.list_runs()] == ["b", "a"]
    finally:
        store.close()


def test_a_run_with_a_short_ttl_is_refreshed_by_every_write_past_one_percent(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "ttl.db")
    try:
        store.begin_run("r", ttl=0.5)  # the touch may be skipped for 5 ms only
        time.sleep(0.02)
        store.put_step(_record("r", 0))
        info = store.get_run("r")
        assert info is not None and info.expires_at is not None
        assert info.expires_at == pytest.approx(info.updated_at + 0.5)
        assert time.time() - info.updated_at < 0.02
    finally:
        store.close()
