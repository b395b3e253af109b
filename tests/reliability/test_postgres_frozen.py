"""A frozen PostgreSQL never hangs the agent (issue 23, item 5).

A private cluster (this test's own) has every server process SIGSTOPped: the kernel still
acknowledges the client's bytes, so no TCP timeout fires and `lock_timeout` (enforced by the
frozen server) never does. The store's client-side deadline ends each operation in
`StoreUnavailableError` naming the server within the deadline plus one second, and once the
server is continued the next operation goes through, nothing lost. The async path (the
event loop's pool, the same watchdog) is held to the same, in the same process after the
sync test, with no wait after the thaw.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _pg_servers import PrivateCluster, need, postgres_bindir

import agentrewind
from agentrewind import StoreUnavailableError
from postgres_support import step as rec

# Deadlines measured to the second: alone, not beside an xdist worker.
pytestmark = [pytest.mark.postgres, pytest.mark.solo]
DEADLINE = 3.0


@pytest.fixture
def cluster() -> Iterator[PrivateCluster]:
    bindir = postgres_bindir()
    need("PostgreSQL server binaries (initdb, pg_ctl)", bindir)
    assert bindir is not None
    server = PrivateCluster(bindir)
    try:
        yield server
    finally:
        _signal(server, signal.SIGCONT)
        server.close()


def _server_pids(server: PrivateCluster) -> list[int]:
    postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == postmaster:
                children.append(int(entry.name))
    return [postmaster, *children]


def _signal(server: PrivateCluster, sig: signal.Signals) -> None:
    for pid in _server_pids(server):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            continue


def test_every_operation_on_a_frozen_server_fails_within_the_deadline(
    cluster: PrivateCluster,
) -> None:
    store = agentrewind.connect(f"{cluster.url}?deadline={DEADLINE}&lock_timeout=1")
    try:
        assert store.acquire_lease("r", "A", 60).acquired
        store.begin_run("r", owner="A")
        store.put_step(rec("r", "one", 1), owner="A")
        _signal(cluster, signal.SIGSTOP)
        for attempt in (
            lambda: store.put_step(rec("r", "two", 2), owner="A"),
            lambda: store.load_steps("r"),
            lambda: store.list_runs(),
        ):
            t0 = time.monotonic()
            with pytest.raises(StoreUnavailableError) as caught:
                attempt()
            took = time.monotonic() - t0
            assert took <= DEADLINE + 1.0, took
            assert str(cluster.port) in str(caught.value)
            assert "applied" in str(caught.value)  # says whether a write may have landed
        _signal(cluster, signal.SIGCONT)
        store.put_step(rec("r", "four", 4), owner="A")  # the server is back: it goes through
        keys = [s.key for s in store.load_steps("r")]
        assert keys[0] == "one" and keys[-1] == "four"  # nothing half-written, nothing lost
        assert set(keys) <= {"one", "two", "four"}
    finally:
        _signal(cluster, signal.SIGCONT)
        store.close()


async def test_every_async_operation_on_a_frozen_server_fails_within_the_deadline(
    cluster: PrivateCluster,
) -> None:
    store = agentrewind.connect(f"{cluster.url}?deadline={DEADLINE}&lock_timeout=1")
    try:
        assert (await store.aacquire_lease("r", "A", 60)).acquired
        await store.abegin_run("r", owner="A")
        await store.aput_step(rec("r", "one", 1), owner="A")
        _signal(cluster, signal.SIGSTOP)
        for attempt in (
            lambda: store.aput_step(rec("r", "two", 2), owner="A"),
            lambda: store.aload_steps("r"),
            lambda: store.alist_runs(),
        ):
            t0 = time.monotonic()
            with pytest.raises(StoreUnavailableError) as caught:
                await asyncio.wait_for(attempt(), DEADLINE + 30)  # (a hang fails, not blocks)
            took = time.monotonic() - t0
            assert took <= DEADLINE + 1.0, took
            assert str(cluster.port) in str(caught.value)
        _signal(cluster, signal.SIGCONT)
        await store.aput_step(rec("r", "four", 4), owner="A")  # back: it goes through
        keys = [s.key for s in await store.aload_steps("r")]
        assert keys[0] == "one" and keys[-1] == "four"
        assert set(keys) <= {"one", "two", "four"}
    finally:
        _signal(cluster, signal.SIGCONT)
        await store.aclose()


def test_a_bad_deadline_is_refused() -> None:
    pytest.importorskip("psycopg")
    with pytest.raises(ValueError, match="deadline"):
        agentrewind.connect("postgresql://postgres@127.0.0.1:1/x?deadline=0")
