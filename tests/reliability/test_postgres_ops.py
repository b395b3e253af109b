"""PostgreSQL operability: a server restart, and PgBouncer in transaction pooling mode.

The restart test starts its own cluster (`initdb` + `pg_ctl` on a free port in a temporary
directory): the machine's shared server is never restarted. The PgBouncer tests start Debian's
`pgbouncer` on a free port, in transaction mode, in front of the session's scratch database
(PgBouncer before 1.21 keeps no prepared statements in that mode, hence
`prepare_threshold=none`). See `_pg_servers.py` for when they skip.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from _pg_servers import PgBouncer, PrivateCluster, need, pgbouncer_binary, postgres_bindir
from test_chaos import _graph_anomalies, _journal_anomalies, effects, expect, finish, spawn

import agentrewind
from agentrewind import StoreError, StoreUnavailableError
from agentrewind.testing import StoreConformance
from postgres_support import step as rec

psycopg = pytest.importorskip("psycopg")
pytestmark = pytest.mark.postgres


# -- a server restart ---------------------------------------------------------------------------
@pytest.fixture
def cluster() -> Iterator[PrivateCluster]:
    bindir = postgres_bindir()
    need("PostgreSQL server binaries (initdb, pg_ctl)", bindir)
    assert bindir is not None
    server = PrivateCluster(bindir)
    try:
        yield server
    finally:
        server.close()


def test_a_restart_fails_the_operation_in_flight_clearly_and_the_next_one_reconnects(
    cluster: PrivateCluster,
) -> None:
    url = f"{cluster.url}?namespace=restart&connect_timeout=1"
    with agentrewind.connect(url) as store:
        store.begin_run("r")
        store.put_step(rec("r", "a", 1))
        result: list[Any] = []
        holder = psycopg.connect(cluster.url)
        try:
            # Hold the run's row so the next write is in flight (waiting) when the server goes.
            holder.execute("SELECT 1 FROM ar_runs WHERE run_id = 'r' FOR UPDATE")

            def write() -> None:
                try:
                    store.put_step(rec("r", "b", 2))
                    result.append("applied")
                except Exception as exc:
                    result.append(exc)

            thread = threading.Thread(target=write)
            thread.start()
            time.sleep(0.3)
            assert thread.is_alive()
            cluster.stop("fast")  # terminates every session, the writer's in the middle
            thread.join(30)
        finally:
            holder.close()
        # A fast shutdown ends every session at once; when the lock holder goes first, the
        # waiting write may commit before its own session is ended: then it says so.
        assert len(result) == 1, result
        applied = result[0] == "applied"
        if not applied:
            assert isinstance(result[0], StoreUnavailableError), result
            assert f"127.0.0.1:{cluster.port}" in str(result[0])
        with pytest.raises(StoreUnavailableError):  # still down: an error, not a hang
            store.get_run("r")
        cluster.start()
        store.put_step(rec("r", "c", 3))  # the pool's dead connections are replaced
        keys = [s.key for s in store.load_steps("r")]
        if applied:  # a write reported done is there after the restart
            assert keys == ["a", "b", "c"]
        else:  # an error means not applied, or applied with its reply lost: never half
            assert keys in (["a", "c"], ["a", "b", "c"])


def _outage(cluster: PrivateCluster, fail: Any) -> None:
    """Stop the server for about four seconds of failing operations, then start it again.

    Meanwhile psycopg_pool's reconnect backoff (1 s, 2 s, 4 s, ...) puts its next attempt
    seconds after the server is back.
    """
    cluster.stop("fast")
    down = time.monotonic()
    while time.monotonic() - down < 4:
        fail()
    cluster.start()


def test_after_a_long_outage_the_first_operation_on_the_restarted_server_goes_through(
    cluster: PrivateCluster,
) -> None:
    url = f"{cluster.url}?namespace=outage&connect_timeout=1"
    with agentrewind.connect(url) as store:
        store.begin_run("r")
        store.put_step(rec("r", "a", 1))

        def fail() -> None:
            with pytest.raises(StoreUnavailableError, match=f"127.0.0.1:{cluster.port}"):
                store.get_run("r")

        _outage(cluster, fail)
        store.put_step(rec("r", "b", 2))  # not a PoolTimeout: the pool is still backing off
        assert [s.key for s in store.load_steps("r")] == ["a", "b"]


def test_a_pool_that_gave_up_reconnecting_is_used_again_after_the_outage(
    cluster: PrivateCluster,
) -> None:
    url = f"{cluster.url}?namespace=gaveup&connect_timeout=1"
    with agentrewind.connect(url) as store:
        store.begin_run("r")
        pool: Any = store.db.pool  # type: ignore[attr-defined]
        pool.reconnect_timeout = 1.0  # it gives up after 1 s instead of 5 minutes

        def fail() -> None:
            with pytest.raises(StoreUnavailableError):
                store.get_run("r")

        _outage(cluster, fail)
        for i in range(3):  # served beside the pool while it has no connection
            store.put_step(rec("r", f"s{i}", i + 1))
        deadline = time.monotonic() + 10
        while not pool.get_stats().get("pool_available", 0) and time.monotonic() < deadline:
            store.get_run("r")  # each operation asks the pool to grow again
            time.sleep(0.05)
        assert pool.get_stats().get("pool_available", 0) >= 1  # the pool is back in use
        assert [s.key for s in store.load_steps("r")] == ["s0", "s1", "s2"]


def test_an_outage_the_store_recovers_from_is_one_warning_not_the_pools_dozens(
    cluster: PrivateCluster, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from psycopg_pool import ConnectionPool

    caplog.set_level(logging.WARNING, logger="psycopg.pool")
    caplog.set_level(logging.INFO, logger="agentrewind")  # (last: it sets the handler's level)
    url = f"{cluster.url}?namespace=quiet&connect_timeout=1&max_size=4"
    with agentrewind.connect(url) as store:
        store.begin_run("r")
        # four pooled connections, each broken by the restart
        threads = [threading.Thread(target=store.get_run, args=("r",)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

        def fail() -> None:
            with pytest.raises(StoreUnavailableError):
                store.get_run("r")

        for outage in range(2):  # each outage: one line
            _outage(cluster, fail)
            for i in range(4):
                store.put_step(rec("r", f"s{outage}{i}", i + 1))
    ours = [r for r in caplog.records if r.name.startswith("agentrewind")]
    pools = [r for r in caplog.records if r.name == "psycopg.pool" and r.levelno >= logging.WARNING]
    assert pools == [], [r.getMessage() for r in pools]
    warned = [r.getMessage() for r in ours if r.levelno == logging.WARNING]
    assert len(warned) == 2 and all(f"127.0.0.1:{cluster.port}" in m for m in warned), warned
    back = [r.getMessage() for r in ours if r.levelno == logging.INFO and "again" in r.getMessage()]
    assert len(back) == 2 and all(" folded)" in m for m in back), back
    # an application's own pool keeps its warnings
    caplog.clear()
    cluster.stop("fast")
    other = ConnectionPool(cluster.url, min_size=1, open=False, name="theirs")
    try:
        other.open(wait=False)
        time.sleep(1.5)
    finally:
        other.close(timeout=1)
    assert any(r.name == "psycopg.pool" for r in caplog.records)


async def test_after_a_long_outage_the_first_async_operation_goes_through(
    cluster: PrivateCluster,
) -> None:
    import asyncio

    url = f"{cluster.url}?namespace=aoutage&connect_timeout=1"
    store = agentrewind.connect(url)
    try:
        await store.abegin_run("r")
        await store.aput_step(rec("r", "a", 1))
        loop = asyncio.get_running_loop()

        def fail() -> None:
            future = asyncio.run_coroutine_threadsafe(store.aput_step(rec("r", "x", 9)), loop)
            with pytest.raises(StoreUnavailableError, match=f"127.0.0.1:{cluster.port}"):
                future.result(30)

        await asyncio.to_thread(_outage, cluster, fail)
        await store.aput_step(rec("r", "b", 2))
        assert [s.key for s in await store.aload_steps("r")] == ["a", "b"]
    finally:
        await store.aclose()


def test_the_saver_goes_on_after_a_restart(cluster: PrivateCluster) -> None:
    pytest.importorskip("langgraph")
    from langgraph.checkpoint.base import empty_checkpoint

    from agentrewind_langgraph import RewindSaver

    cfg: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    with RewindSaver(f"{cluster.url}?connect_timeout=1") as saver:
        first = saver.put(cfg, empty_checkpoint(), {"step": 0}, {})
        cluster.stop("immediate")  # a crash: no shutdown checkpoint
        cluster.start()
        second = saver.put(first, empty_checkpoint(), {"step": 1}, {})
        latest = saver.get_tuple(cfg)
        assert latest is not None and latest.config == second
        assert [t.metadata["step"] for t in saver.list(cfg)] == [1, 0]


# -- PgBouncer, transaction pooling -------------------------------------------------------------
@pytest.fixture(scope="module")
def bouncer_url(postgres_url: str) -> Iterator[str]:
    binary = pgbouncer_binary()
    need("pgbouncer", binary)
    assert binary is not None
    parts = urlsplit(postgres_url)
    bouncer = PgBouncer(binary, parts.port or 5432, parts.path.lstrip("/"))
    try:
        yield f"{bouncer.url}?prepare_threshold=none"
    finally:
        bouncer.close()


class TestStoreConformanceThroughPgBouncer(StoreConformance):
    """The whole store contract, every statement through a transaction-mode pooler."""

    @pytest.fixture(autouse=True)
    def _through(self, bouncer_url: str) -> None:
        self.url = bouncer_url

    def open_store(self, namespace: str) -> agentrewind.Store:
        return agentrewind.connect(self.url, namespace=namespace)


def test_saver_conformance_through_pgbouncer(bouncer_url: str) -> None:
    pytest.importorskip("langgraph.checkpoint.conformance")
    import asyncio

    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.checkpoint.conformance import checkpointer_test, validate

    from agentrewind_langgraph import RewindSaver

    @checkpointer_test(name="RewindSaver[pgbouncer]")
    async def factory() -> AsyncIterator[BaseCheckpointSaver[Any]]:
        saver = RewindSaver(f"{bouncer_url}&namespace=lg-{uuid.uuid4().hex[:8]}&max_size=2")
        try:
            yield saver
        finally:
            for thread in saver.backend.thread_ids():
                saver.delete_thread(thread)
            saver.close()

    report = asyncio.run(validate(factory))
    results = report.to_dict()["results"]
    assert [f for r in results.values() for f in r["failures"]] == []
    assert sum(r["tests_passed"] for r in results.values()) == 81


def test_prepared_statements_behind_an_old_pgbouncer_name_the_fix(bouncer_url: str) -> None:
    url = bouncer_url.replace("?prepare_threshold=none", f"?namespace=prep-{uuid.uuid4().hex[:8]}")
    errors: list[Exception] = []
    with agentrewind.connect(url, max_size=4) as store:

        def work(n: int) -> None:
            try:
                for i in range(40):
                    store.begin_run(f"r{n}-{i}")
                    store.get_run(f"r{n}-{i}")
            except Exception as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    if not errors:
        pytest.skip("this PgBouncer keeps prepared statements in transaction mode (1.21+)")
    for exc in errors:
        assert isinstance(exc, StoreError) and "prepare_threshold=none" in str(exc), exc


@pytest.mark.parametrize("mode", ["journal", "graph"])
def test_resume_after_sigkill_through_pgbouncer(
    bouncer_url: str, tmp_path: Path, mode: str
) -> None:
    if mode == "graph":
        pytest.importorskip("langgraph.graph")
    url = f"{bouncer_url}&namespace=pgb-{uuid.uuid4().hex[:8]}"
    run_id, log, steps = f"{mode}-{uuid.uuid4().hex[:8]}", tmp_path / "effects", 20
    a = spawn(mode, url, run_id, log, steps, 0.6, 0.03)
    expect(a, "ready")
    time.sleep(random.uniform(0.1, 0.4))
    a.kill()
    a.communicate()
    b = spawn(mode, url, run_id, log, steps, 5.0, 0.0)
    code, out, err = finish(b)
    assert code == 0 and "done" in out, err[-2000:]
    if mode == "journal":
        with agentrewind.connect(url) as store:
            bad = _journal_anomalies(store, run_id, steps, effects(log), a.pid, b.pid)
    else:
        bad = _graph_anomalies(url, run_id, steps, effects(log), a.pid, b.pid)
    assert bad == []
