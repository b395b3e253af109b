"""Edge cases found in review: expired runs stay dead, prune refuses negatives, odd record bytes."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import agentrewind
from agentrewind import CorruptRecordError, StepRecord


def _journal_twice(url: str, calls: list[int]) -> list[str]:
    mw = agentrewind.Middleware(url)
    try:
        with mw.run("ttl-run", ttl=0.2) as run:
            run.step("f", calls.append, 1)
        time.sleep(0.4)
        assert mw.store.get_run("ttl-run") is None
        with mw.run("ttl-run", ttl=0.2) as run:
            run.step("f", calls.append, 1)
            return [e.outcome for e in run.events]
    finally:
        mw.close()


def test_an_expired_run_never_replays_when_its_id_is_used_again(store_url: str) -> None:
    # SQLite kept expired rows until prune; begin_run revived them and their steps replayed.
    calls: list[int] = []
    assert _journal_twice(store_url, calls) == ["executed"]
    assert calls == [1, 1]


def test_writing_steps_to_an_expired_sqlite_run_does_not_revive_its_old_steps(
    tmp_path: Path,
) -> None:
    store = agentrewind.connect(f"sqlite:///{tmp_path / 'x.db'}")
    try:
        old = StepRecord("r", "s-old", "k-old", "custom", "old", "completed", 1)
        store.begin_run("r", ttl=0.1)
        store.put_step(old)
        time.sleep(0.25)
        store.put_step(StepRecord("r", "s-new", "k-new", "custom", "new", "completed", 1))
        assert [s.step_id for s in store.load_steps("r")] == ["s-new"]
        assert store.get_step("r", "s-old") is None
    finally:
        store.close()


@pytest.mark.parametrize("kwargs", [{"keep_last": -1}, {"older_than": -5.0}])
def test_prune_refuses_negative_limits_and_deletes_nothing(
    tmp_path: Path, kwargs: dict[str, float]
) -> None:
    store = agentrewind.connect(f"sqlite:///{tmp_path / 'p.db'}")
    try:
        for i in range(3):
            store.begin_run(f"r{i}")
        with pytest.raises(ValueError, match="0 or more"):
            store.prune(**kwargs)  # type: ignore[arg-type]
        assert len(store.list_runs()) == 3
    finally:
        store.close()


def test_cli_prune_with_a_negative_keep_last_is_an_error(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with agentrewind.connect(url) as store:
        store.begin_run("keep-me")
    cmd = [sys.executable, "-m", "agentrewind.cli", "--store", url, "prune", "--keep-last", "-1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "keep_last must be 0 or more" in proc.stderr
    with agentrewind.connect(url) as store:
        assert [r.run_id for r in store.list_runs()] == ["keep-me"]


def test_a_record_stored_as_text_is_judged_by_its_checksum(tmp_path: Path) -> None:
    # A hand edit through the sqlite3 shell turns the BLOB into TEXT; that used to be a
    # TypeError deep in decode instead of an agentrewind error.
    path = tmp_path / "t.db"
    mw = agentrewind.Middleware(f"sqlite:///{path}")
    with mw.run("r") as run:
        run.step("fetch", lambda: "rows")
    mw.close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE ar_steps SET data = CAST(data AS TEXT)")
    conn.commit()
    with agentrewind.connect(f"sqlite:///{path}") as store:
        assert [s.output for s in store.load_steps("r")] == ["rows"]  # intact bytes: fine
    conn.execute("UPDATE ar_steps SET data = replace(data, 'rows', 'ROWS')")
    conn.commit()
    conn.close()
    with agentrewind.connect(f"sqlite:///{path}") as store, pytest.raises(CorruptRecordError):
        store.load_steps("r")


@pytest.mark.parametrize("value", [None, 42, ["AR1"]])
def test_decode_of_a_foreign_value_is_a_corrupt_record_error(value: object) -> None:
    with pytest.raises(CorruptRecordError):
        StepRecord.decode(value)  # type: ignore[arg-type]


def test_a_value_that_contains_itself_is_a_serialization_error_and_the_run_goes_on() -> None:
    loop: dict[str, object] = {}
    loop["self"] = loop
    mw = agentrewind.Middleware("memory://")
    with mw.run("cyc") as run:
        with pytest.raises(agentrewind.SerializationError, match="contains itself") as info:
            run.step("cyclic", lambda: loop)
        assert info.value.path == "$"
        assert run.step("after", lambda: "fine") == "fine"
    assert [s.name for s in mw.store.load_steps("cyc") if s.status == "completed"] == ["after"]
