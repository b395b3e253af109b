"""Redis losing its data is detected, never papered over (issue 11, item 6).

Each test starts its own `redis-server` (no persistence) and restarts it on the same port.
Before this, a resume after a restart silently re-ran every finished step, and a run that was
in flight carried on and ended `completed` with its first steps and its lease gone.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import agentrewind
from agentrewind import DataLostError, RedisPersistenceWarning
from redis_support import RedisServer


@pytest.fixture
def server(redis_server_bin: str, tmp_path: Path) -> Iterator[RedisServer]:
    srv = RedisServer(tmp_path / "redis")
    yield srv
    srv.kill()


def _restart(server: RedisServer) -> None:
    server.kill()
    server.start()


def _store(server: RedisServer) -> agentrewind.Store:
    return agentrewind.connect(server.url, persistence_warning=False)


def test_a_restart_mid_run_stops_the_run_with_a_named_error(server: RedisServer) -> None:
    store = _store(server)
    mw = agentrewind.Middleware(store)
    ran: list[int] = []
    try:
        lost = pytest.raises(DataLostError, match="Redis restart without persistence")
        with lost, mw.run("job") as run:
            run.step("s", ran.append, 1)
            _restart(server)
            run.step("s", ran.append, 2)
        assert ran == [1]
        assert store.get_run("job") is None  # nothing was written back: no half run
        assert store.list_runs() == []
    finally:
        store.close()


def test_a_restart_between_runs_is_reported_before_anything_reruns(server: RedisServer) -> None:
    store = _store(server)
    mw = agentrewind.Middleware(store)
    ran: list[int] = []
    try:
        with pytest.raises(RuntimeError), mw.run("job") as run:
            run.step("s", ran.append, 1)
            run.step("s", ran.append, 2)
            raise RuntimeError("crash after two steps")
        _restart(server)
        lost = pytest.raises(DataLostError, match="lost its data since this store connected")
        with lost, mw.run("job") as run:
            run.step("s", ran.append, 1)
        assert ran == [1, 2]  # no finished step ran again
        assert store.get_run("job") is None
    finally:
        store.close()


def test_a_flush_mid_run_is_detected(server: RedisServer) -> None:
    import redis

    store = _store(server)
    mw = agentrewind.Middleware(store)
    client = redis.Redis.from_url(server.url)
    try:
        with pytest.raises(DataLostError, match="FLUSHALL"), mw.run("job") as run:
            run.step("s", lambda: 1)
            client.flushall()
            run.step("t", lambda: 2)
        assert store.get_run("job") is None
    finally:
        client.close()
        store.close()


def test_a_server_that_persists_nothing_warns_once(
    redis_server_bin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENTREWIND_REDIS_PERSISTENCE_WARNING")  # tests/conftest.py sets it
    volatile = RedisServer(tmp_path / "volatile")
    durable = RedisServer(tmp_path / "durable", appendonly=True)
    try:
        with pytest.warns(RedisPersistenceWarning, match="appendonly yes") as caught:
            agentrewind.connect(volatile.url).close()
            agentrewind.connect(volatile.url).close()  # once per server and process
        assert len(caught) == 1
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            agentrewind.connect(durable.url).close()
            agentrewind.connect(volatile.url.replace("/0", "/1"), persistence_warning=False).close()
    finally:
        volatile.kill()
        durable.kill()
