"""What a store or a run does when it cannot open cleanly."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

import agentrewind
from agentrewind import CorruptRecordError, Middleware


def test_corrupt_journal_refuses_the_run_marks_it_failed_and_frees_the_lease(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    mw = Middleware(f"sqlite:///{path}")
    with mw.run("r") as run:
        run.step("a", lambda: 1)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE ar_steps SET data = CAST('AR1:00000000:{}' AS BLOB)")
    with pytest.raises(CorruptRecordError, match="run 'r'"):
        mw.run("r").__enter__()
    info = mw.store.get_run("r")
    assert info is not None and info.status == "failed"
    assert mw.store.acquire_lease("r", "someone-else", 5).acquired
    mw.close()


def test_busy_timeout_must_be_a_number(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"busy_timeout .* must be a number of seconds"):
        agentrewind.connect(f"sqlite:///{tmp_path / 'x.db'}?busy_timeout=abc")


def test_prune_of_expired_runs_stays_in_its_namespace(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    with agentrewind.connect(url, namespace="a") as a, agentrewind.connect(url, namespace="b") as b:
        a.begin_run("old", ttl=0.1)
        b.begin_run("keep")
        time.sleep(0.2)
        assert b.prune() == 0  # a's expired run is not b's to count or delete
        with sqlite3.connect(tmp_path / "shared.db") as conn:
            rows = conn.execute("SELECT ns, run_id FROM ar_runs ORDER BY ns").fetchall()
        assert rows == [("a", "old"), ("b", "keep")]
        assert a.prune() == 1
