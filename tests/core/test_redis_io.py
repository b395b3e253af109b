"""The Redis store's two transports: one flow, the same replies sync and async, no threads."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import agentrewind
from agentrewind.adapters import RedisCommand, RedisFlow, RedisPipeline, RedisScript
from agentrewind.errors import StoreError, StoreUnavailableError
from agentrewind.stores.redis import RedisStore
from redis_support import free_port

pytest.importorskip("redis")

INCR_BY = "return redis.call('INCRBY', KEYS[1], ARGV[1])"


@pytest.fixture(params=["redis", "redis-cluster"])
def store(request: pytest.FixtureRequest, namespace: str) -> Iterator[RedisStore]:
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
    else:
        url = request.getfixturevalue("redis_cluster")
    s = agentrewind.connect(f"{url}{'&' if '?' in url else '?'}namespace={namespace}")
    assert isinstance(s, RedisStore)
    s.register_scripts({"test:incr": INCR_BY, "test:fail": "return redis.error_reply('nope')"})
    yield s
    s.close()


def counter(store: RedisStore, key: str, by: int) -> RedisFlow[list[Any]]:
    """Add `by` with a script, read it back, then read it twice in one pipeline."""
    k = store.namespace_key(key)
    added = yield RedisScript("test:incr", [k], [by])
    read = yield RedisCommand("get", k)
    both = yield RedisPipeline([RedisCommand("get", k), RedisScript("test:incr", [k], [0])])
    return [added, int(read), [int(x) for x in both]]


async def test_one_flow_gives_the_same_replies_on_both_transports(store: RedisStore) -> None:
    assert store.drive(counter(store, "a", 2)) == [2, 2, [2, 2]]
    assert await store.adrive(counter(store, "a", 3)) == [5, 5, [5, 5]]
    assert store.drive(counter(store, "a", 0)) == [5, 5, [5, 5]]


async def test_concurrent_async_flows_use_no_thread_and_all_apply(store: RedisStore) -> None:
    before = threading.active_count()
    results = await asyncio.gather(
        *(store.adrive(counter(store, f"k{i % 7}", 1)) for i in range(200))
    )
    assert threading.active_count() == before
    assert len(results) == 200
    totals = [await store.adrive(counter(store, f"k{i}", 0)) for i in range(7)]
    assert sum(t[0] for t in totals) == 200


async def test_a_flushed_script_cache_is_refilled(store: RedisStore) -> None:
    store.drive(counter(store, "s", 1))
    for client in [store.client]:
        client.script_flush()
    assert (await store.adrive(counter(store, "s", 1)))[0] == 2
    client.script_flush()
    assert store.drive(counter(store, "s", 1))[0] == 3


async def test_script_errors_are_store_errors_on_both_transports(store: RedisStore) -> None:
    def failing() -> RedisFlow[Any]:
        return (yield RedisScript("test:fail", [store.namespace_key("f")], []))

    with pytest.raises(StoreError, match="nope"):
        store.drive(failing())
    outcomes = await asyncio.gather(
        store.adrive(failing()), store.adrive(counter(store, "ok", 1)), return_exceptions=True
    )
    assert isinstance(outcomes[0], StoreError) and "nope" in str(outcomes[0])
    assert outcomes[1] == [1, 1, [1, 1]]  # a failing script of a batch fails alone


def test_closing_after_the_loop_ended_leaves_no_connection(store: RedisStore) -> None:
    asyncio.run(store.adrive(counter(store, "c", 1)))
    (side,) = store._aclients.values()
    store.close()
    assert store._aclients == {}
    if not store.cluster:
        pool = side.client.connection_pool
        conns = [*pool._available_connections, *pool._in_use_connections]
        assert conns and all(c._writer is None for c in conns)


async def test_an_unreachable_server_is_unavailable(redis_url: str, namespace: str) -> None:
    s = agentrewind.connect(f"{redis_url}?namespace={namespace}")
    assert isinstance(s, RedisStore)
    s.register_scripts({"test:incr": INCR_BY})
    s._connect = (f"redis://127.0.0.1:{free_port()}/0", s._connect[1])  # as if it went away
    with pytest.raises(StoreUnavailableError):
        await s.adrive(counter(s, "x", 1))
    await s.aclose()
