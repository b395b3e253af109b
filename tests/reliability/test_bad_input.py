"""Bad input and broken stores: a clear agentrewind error each time, nothing half-written."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from _helpers import backend_url, cleanup_redis, spawn, unique, wait_line

import agentrewind
from agentrewind.records import StepRecord
from agentrewind.stores.redis._keys import RunKeys
from redis_support import RedisServer, free_port


@pytest.fixture(params=["sqlite", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    redis_url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    with backend_url(request.param, tmp_path, redis_url) as u:
        yield u


def _names(records: list[StepRecord]) -> list[tuple[str, str]]:
    return [(r.name, r.status) for r in records]


# -- unserializable output ----------------------------------------------------------------
def test_unserializable_output_names_its_path_and_the_run_goes_on(url: str) -> None:
    mw = agentrewind.Middleware(url)
    calls: list[str] = []

    def leaky(fixed: bool) -> dict[str, object]:
        calls.append("leaky")
        return {"rows": [1, 2], "conn": "closed" if fixed else threading.Lock()}

    with mw.run("bad-output") as run:
        assert run.step("first", lambda: 1) == 1
        with pytest.raises(agentrewind.SerializationError) as info:
            run.step("leaky", leaky, False)
        assert info.value.path == "$.conn"
        assert "$.conn" in str(info.value) and "lock" in str(info.value)
        # Nothing half-written: the step is only marked started (it ran), with no output.
        journal = mw.store.load_steps("bad-output")
        assert _names(journal) == [("first", "completed"), ("leaky", "started")]
        assert journal[1].output is None
        # The run goes on: later steps record normally.
        assert run.step("later", lambda x: x + 1, 41) == 42
        assert run.step("leaky", leaky, True) == {"rows": [1, 2], "conn": "closed"}
    assert calls == ["leaky", "leaky"]

    with mw.run("bad-output") as run:
        assert run.step("first", lambda: 1) == 1
        assert run.step("later", lambda x: x + 1, 41) == 42
        assert run.step("leaky", leaky, True) == {"rows": [1, 2], "conn": "closed"}
        assert [e.outcome for e in run.events] == ["replayed"] * 3
    assert calls == ["leaky", "leaky"]
    assert mw.store.get_run("bad-output").status == "completed"  # type: ignore[union-attr]
    mw.close()


# -- altered bytes ------------------------------------------------------------------------
def _record_two_steps(url: str, run_id: str) -> None:
    mw = agentrewind.Middleware(url)
    with mw.run(run_id) as run:
        run.step("price", lambda: {"amount": 100})
        run.step("charge", lambda: "ok")
    mw.close()


def _assert_corrupt_is_refused(url: str, run_id: str, key: str, read_raw: object) -> None:
    store = agentrewind.connect(url)
    with pytest.raises(agentrewind.CorruptRecordError) as info:
        store.load_steps(run_id)
    assert run_id in str(info.value) and key in str(info.value)
    assert "checksum" in str(info.value)
    before = read_raw()  # type: ignore[operator]
    mw = agentrewind.Middleware(store)
    with pytest.raises(agentrewind.CorruptRecordError), mw.run(run_id):
        pytest.fail("a run with a corrupt record must not open")
    assert read_raw() == before  # type: ignore[operator]  # the bad record is kept as it was
    # The failed open released its lease: another attempt gets the same clear error.
    with pytest.raises(agentrewind.CorruptRecordError), mw.run(run_id):
        pytest.fail("still corrupt")
    store.close()


def test_altered_record_bytes_in_sqlite(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}?namespace=alter"
    _record_two_steps(url, "tampered")
    conn = sqlite3.connect(db)
    key, data = conn.execute(
        "SELECT key, data FROM ar_steps WHERE run_id = 'tampered' AND key LIKE 'custom:price:%'"
    ).fetchone()
    assert b'"amount":100' in data
    conn.execute(
        "UPDATE ar_steps SET data = ? WHERE run_id = 'tampered' AND key = ?",
        (data.replace(b'"amount":100', b'"amount":900'), key),
    )
    conn.commit()

    def read_raw() -> list[tuple[str, bytes]]:
        return conn.execute("SELECT key, data FROM ar_steps ORDER BY key").fetchall()

    _assert_corrupt_is_refused(url, "tampered", key, read_raw)
    # A truncated record is refused the same way.
    conn.execute("UPDATE ar_steps SET data = ? WHERE key = ?", (data[: len(data) // 2], key))
    conn.commit()
    _assert_corrupt_is_refused(url, "tampered", key, read_raw)
    conn.close()


def test_altered_record_bytes_in_redis(redis_url: str) -> None:
    ns, prefix = unique("alter"), unique("arrel")
    url = f"{redis_url}?namespace={ns}&prefix={prefix}"
    client = redis.Redis.from_url(redis_url)
    try:
        _record_two_steps(url, "tampered")
        steps_key = RunKeys.of(prefix, ns, "tampered").steps
        raw = client.hgetall(steps_key)
        (key,) = [k for k in raw if k.startswith(b"custom:price:")]
        client.hset(steps_key, key, raw[key].replace(b'"amount":100', b'"amount":900'))

        def read_raw() -> dict[bytes, bytes]:
            return client.hgetall(steps_key)  # type: ignore[no-any-return]

        _assert_corrupt_is_refused(url, "tampered", key.decode(), read_raw)
    finally:
        client.close()
        cleanup_redis(redis_url, f"{prefix}:*")


# -- newer schema -------------------------------------------------------------------------
def test_sqlite_at_a_newer_schema_version_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    _record_two_steps(f"sqlite:///{db}", "old")
    conn = sqlite3.connect(db)
    conn.execute("UPDATE ar_schema_version SET version = 99")
    conn.commit()
    dump = list(conn.iterdump())
    with pytest.raises(agentrewind.SchemaVersionError) as info:
        agentrewind.connect(f"sqlite:///{db}")
    assert "99" in str(info.value) and str(db) in str(info.value)
    assert "upgrade agentrewind" in str(info.value)
    assert list(conn.iterdump()) == dump  # nothing was migrated or written
    conn.close()


def test_redis_at_a_newer_schema_version_is_refused(redis_url: str) -> None:
    prefix = unique("arrel")
    client = redis.Redis.from_url(redis_url)
    try:
        client.set(f"{prefix}:schema_version", 99)
        with pytest.raises(agentrewind.SchemaVersionError) as info:
            agentrewind.connect(f"{redis_url}?prefix={prefix}")
        assert "99" in str(info.value) and prefix in str(info.value)
        assert client.get(f"{prefix}:schema_version") == b"99"
        assert list(client.scan_iter(match=f"{prefix}:*")) == [f"{prefix}:schema_version".encode()]
    finally:
        client.close()
        cleanup_redis(redis_url, f"{prefix}:*")


# -- Redis unreachable or killed ----------------------------------------------------------
def test_unreachable_redis_is_a_store_unavailable_error_at_the_top() -> None:
    port = free_port()
    code = f"import agentrewind; agentrewind.Middleware('redis://127.0.0.1:{port}/0')"
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    elapsed = time.perf_counter() - t0
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("agentrewind.errors.StoreUnavailableError: Redis at"), proc.stderr
    assert f"127.0.0.1:{port}" in last and "unreachable" in last
    assert elapsed < 10, elapsed

    with pytest.raises(agentrewind.StoreUnavailableError) as info:
        agentrewind.connect(f"redis://127.0.0.1:{port}/0")
    assert isinstance(info.value.__cause__, redis.ConnectionError)


def test_redis_killed_mid_run_then_restarted(tmp_path: Path, redis_server_bin: str) -> None:
    server = RedisServer(tmp_path / "redis", appendonly=True)
    url = f"{server.url}?namespace=killed"
    ran: list[int] = []
    try:
        mw = agentrewind.Middleware(url)

        def work(i: int) -> int:
            ran.append(i)
            if i == 5 and len(ran) == 6:
                server.kill()  # the store dies while step 5 runs
            return i * i

        step_errors: list[BaseException] = []
        with pytest.raises(agentrewind.StoreUnavailableError) as info, mw.run("r") as run:
            for i in range(10):
                try:
                    run.step("work", work, i)
                except BaseException as exc:
                    step_errors.append(exc)
                    raise
        # The step itself raised our error (its `completed` write failed), not redis-py's.
        assert [type(e) for e in step_errors] == [agentrewind.StoreUnavailableError]
        assert isinstance(step_errors[0].__cause__, redis.ConnectionError)
        assert "unreachable" in str(info.value) and str(server.port) in str(info.value)
        assert ran == [0, 1, 2, 3, 4, 5]
        mw.close()

        server.start()  # same port, same directory: the append-only file is replayed
        mw = agentrewind.Middleware(url)
        journal = mw.store.load_steps("r")  # every record decodes and passes its checksum
        assert _names(journal) == [("work", "completed")] * 5 + [("work", "started")]
        assert [r.output for r in journal] == [0, 1, 4, 9, 16, None]
        # the step in flight when Redis died started and may have run: it says so
        with mw.run("r") as run, pytest.warns(agentrewind.RerunWarning, match="custom:work"):
            assert [run.step("work", work, i) for i in range(10)] == [i * i for i in range(10)]
        assert run.metrics.replay_hits == 5 and run.metrics.reruns == 1
        assert ran == [0, 1, 2, 3, 4, 5, 5, 6, 7, 8, 9]
        info_after = mw.store.get_run("r")
        assert info_after is not None and info_after.status == "completed"
        records = mw.store.load_steps("r")
        assert [r.status for r in records if "@" not in r.key] == ["completed"] * 10
        # the attempt the kill cut off is kept as history beside its rerun (issue 26)
        assert [(r.status, r.meta.get("replaced_by") is not None) for r in records
                if "@" in r.key] == [("started", True)]  # fmt: skip
        mw.close()
    finally:
        server.kill()


# -- SQLite locked by another connection --------------------------------------------------
def test_sqlite_write_lock_held_six_seconds_causes_no_failure(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    mw = agentrewind.Middleware(f"sqlite:///{db}")
    with mw.run("locked") as run:
        run.step("before", lambda: 0)
        holder = spawn("lock", str(db), "6")
        wait_line(holder, "locked")
        t0 = time.perf_counter()
        results = [run.step("during", lambda i: i, i) for i in range(3)]
        waited = time.perf_counter() - t0
        wait_line(holder, "released")
        holder.communicate(timeout=10)
        assert holder.returncode == 0
    assert results == [0, 1, 2]
    assert waited > 4.0, f"the writes should have waited for the lock ({waited:.1f}s)"
    assert [r.status for r in mw.store.load_steps("locked")] == ["completed"] * 4
    mw.close()


def test_sqlite_short_busy_timeout_gives_store_busy_and_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    mw = agentrewind.Middleware(f"sqlite:///{db}?busy_timeout=0.2")
    ran: list[int] = []

    def charge(i: int) -> int:
        ran.append(i)
        return i

    with mw.run("busy") as run:
        run.step("charge", charge, 1)
        holder = spawn("lock", str(db), "2")
        wait_line(holder, "locked")
        with pytest.raises(agentrewind.StoreBusyError) as info:
            run.step("charge", charge, 2)
        assert str(db) in str(info.value) and "nothing was written" in str(info.value)
        assert ran == [1]  # its `started` record could not be written, so it did not run
        wait_line(holder, "released")
        holder.communicate(timeout=10)
        assert holder.returncode == 0
        assert _names(mw.store.load_steps("busy")) == [("charge", "completed")]
        # Once the lock is gone the same call runs under the key a fresh resume would use, as
        # a first attempt (no RerunWarning, no rerun counted: nothing of it was written).
        assert run.step("charge", charge, 2) == 2
        assert run.metrics.reruns == 0
    assert ran == [1, 2]
    with mw.run("busy") as run:
        assert [run.step("charge", charge, i) for i in (1, 2)] == [1, 2]
        assert [e.outcome for e in run.events] == ["replayed", "replayed"]
    assert ran == [1, 2]
    mw.close()
