"""The Redis store's two transports: one flow, the same replies sync and async, no threads."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import agentrewind
from agentrewind.adapters import RedisCommand, RedisFlow, RedisPipeline, RedisScript
from agentrewind.errors import StoreError, StoreUnavailableError
from agentrewind.stores.redis import RedisStore
from redis_support import RedisServer, free_port

pytest.importorskip("redis")

INCR_BY = "return redis.call('INCRBY', KEYS[1], ARGV[1])"
SCRIPTS = {"test:incr": INCR_BY, "test:fail": "return redis.error_reply('nope')"}


@pytest.fixture(params=["redis", "redis-cluster"])
def store(request: pytest.FixtureRequest, namespace: str) -> Iterator[RedisStore]:
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
    else:
        url = request.getfixturevalue("redis_cluster")
    s = agentrewind.connect(f"{url}{'&' if '?' in url else '?'}namespace={namespace}")
    assert isinstance(s, RedisStore)
    s.register_scripts(SCRIPTS)
    yield s
    s.close()


@pytest.fixture(scope="module")
def private_redis_url(
    redis_server_bin: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A server of this module's own: `scripting` counts every client of the server, so no
    other test's connection may be there (in a shared server, whatever tests ran before on
    the same worker leave theirs)."""
    server = RedisServer(tmp_path_factory.mktemp("redis-io"))
    try:
        yield server.url
    finally:
        server.kill()


@pytest.fixture
def single(private_redis_url: str, namespace: str) -> Iterator[tuple[RedisStore, redis.Redis]]:
    """A store on one server (the sync idle-connection path) with the test scripts, and an
    admin client of that server."""
    redis_url = private_redis_url
    s = agentrewind.connect(f"{redis_url}?namespace={namespace}")
    assert isinstance(s, RedisStore)
    s.register_scripts(SCRIPTS)
    admin = redis.Redis.from_url(redis_url)
    yield s, admin
    s.close()
    admin.close()


def scripting(admin: redis.Redis) -> set[int]:
    """Ids of the server's clients whose last command ran a script."""
    return {c["id"] for c in admin.client_list() if c["cmd"] in ("evalsha", "eval")}


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


async def test_concurrent_pipelines_share_round_trips_and_fail_alone(store: RedisStore) -> None:
    def flow(i: int) -> RedisFlow[Any]:
        k = store.namespace_key(f"p{i}")
        calls: list[Any] = [RedisScript("test:incr", [k], [i]), RedisCommand("get", k)]
        if i == 3:
            calls.insert(1, RedisScript("test:fail", [k], []))
        return (yield RedisPipeline(calls))

    store.drive(counter(store, "loaded", 0))  # the script is loaded: no NOSCRIPT re-run
    side = store._async_side()
    made = 0
    pipeline = side.client.pipeline

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal made
        made += 1
        return pipeline(*args, **kwargs)

    side.client.pipeline = counted
    outcomes = await asyncio.gather(*(store.adrive(flow(i)) for i in range(32)),
                                    return_exceptions=True)  # fmt: skip
    assert isinstance(outcomes[3], StoreError) and "nope" in str(outcomes[3])
    assert [o for i, o in enumerate(outcomes) if i != 3] == [
        [i, str(i).encode()] for i in range(32) if i != 3
    ]
    assert store.drive(counter(store, "p3", 0))[0] == 3  # commands before the error applied
    if not store.cluster:  # (a cluster pipeline refuses scripts: they go one by one)
        assert 1 <= made <= 4  # 32 pipelines in a few round trips, not 32


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


def test_sync_scripts_reuse_their_connections_and_outlive_a_dropped_one(
    single: tuple[RedisStore, redis.Redis],
) -> None:
    s, admin = single
    k = s.namespace_key("pin")

    def ours() -> set[int]:
        return scripting(admin)

    def in_thread(seen: list[set[int]]) -> None:
        s.run_script("test:incr", [k], [1])
        seen.append(ours())

    try:
        for _ in range(5):
            s.run_script("test:incr", [k], [1])
        mine = ours()
        assert len(mine) == 1  # five scripts, one connection
        seen: list[set[int]] = []
        t = threading.Thread(target=in_thread, args=(seen,))
        t.start()
        t.join()
        assert seen == [mine]  # another thread, the same idle connection: none per thread
        for cid in ours():
            admin.client_kill_filter(_id=cid)
        assert s.run_script("test:incr", [k], [1]) == 7  # the dropped socket is replaced
        with pytest.raises(StoreError, match="nope"):
            s.run_script("test:fail", [k], [])
        assert s.run_script("test:incr", [k], [1]) == 8  # a script error leaves it in use
        assert len(ours()) == 1
    finally:
        s.close()
    for _ in range(50):  # the server notices closed sockets on its next turn
        if not ours():
            break
        time.sleep(0.02)
    assert ours() == set()  # closing the store closes every thread's connection


def test_sync_pipelines_of_scripts_share_the_idle_connection_and_read_every_reply(
    single: tuple[RedisStore, redis.Redis],
) -> None:
    """A put with held writes is a pipeline of scripts: sent on the scripts' idle connection."""
    s, admin = single
    k = s.namespace_key("pipe")

    def scripts(*calls: RedisScript) -> RedisFlow[Any]:
        return (yield RedisPipeline(list(calls)))

    incr = RedisScript("test:incr", [k], [1])
    assert s.run_script("test:incr", [k], [1]) == 1
    mine = scripting(admin)
    assert s.drive(scripts(incr, incr, incr)) == [2, 3, 4]
    assert scripting(admin) == mine  # the same connection as the single scripts
    with pytest.raises(StoreError, match="nope"):  # an error in the middle of the batch
        s.drive(scripts(incr, RedisScript("test:fail", [k], []), incr))
    assert int(admin.get(k) or 0) == 6  # the scripts around it ran
    assert s.run_script("test:incr", [k], [1]) == 7  # every reply was read: still in step
    admin.script_flush()
    assert s.drive(scripts(incr, incr)) == [8, 9]  # NOSCRIPT: each run again, in order
    assert scripting(admin) == mine


def test_a_connection_that_cannot_be_made_is_not_chained_to_an_empty_stack() -> None:
    # Issue 25: a Redis failure read "during handling of IndexError" (the idle stack).
    from types import SimpleNamespace

    from agentrewind.stores.redis._pin import Pins

    def refuse(**_: object) -> None:
        raise ConnectionRefusedError("no server")

    client = SimpleNamespace(
        connection_pool=SimpleNamespace(connection_class=refuse, connection_kwargs={})
    )
    try:
        Pins()._take(client)
    except ConnectionRefusedError as exc:
        assert exc.__context__ is None
    else:
        raise AssertionError("no error")
