"""The saver's async API on PostgreSQL runs on psycopg's async pool: no thread, no sync
connection; a caller's own `AsyncConnectionPool` or `AsyncConnection` is the one used."""

from __future__ import annotations

import operator
import threading
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.graph import END, START, StateGraph

from agentrewind_langgraph import RewindSaver

pytestmark = pytest.mark.postgres


class State(TypedDict):
    items: Annotated[list[str], operator.add]


def graph(saver: RewindSaver) -> Any:
    builder = StateGraph(State)
    names = [f"n{i}" for i in range(4)]
    for name in names:
        builder.add_node(name, lambda s, name=name: {"items": [name]})
    for a, b in zip([START, *names], [*names, END], strict=True):
        builder.add_edge(a, b)
    return builder.compile(checkpointer=saver)


async def run_graph(saver: RewindSaver) -> str:
    config: Any = {"configurable": {"thread_id": uuid.uuid4().hex}}
    out = await graph(saver).ainvoke({"items": []}, config, durability="sync")
    assert out["items"] == ["n0", "n1", "n2", "n3"]
    found = await saver.aget_tuple(config)
    assert found is not None and found.checkpoint["channel_values"]["items"] == out["items"]
    assert len([t async for t in saver.alist(config)]) == 6
    return str(config["configurable"]["thread_id"])


async def test_the_async_api_uses_no_thread_and_no_sync_connection(postgres_url: str) -> None:
    url = f"{postgres_url}?namespace=lg-{uuid.uuid4().hex[:10]}"
    async with RewindSaver(url, defer_writes=False) as saver:
        await run_graph(saver)  # warm: the loop's async pool is open
        sync_pool: Any = saver.store.db.pool  # type: ignore[attr-defined]
        sync_requests = sync_pool.get_stats().get("requests_num", 0)
        before = {t.ident for t in threading.enumerate()}
        checkouts = saver.store.aio.checkouts  # type: ignore[attr-defined]
        thread = await run_graph(saver)
        await saver.acopy_thread(thread, thread + "-copy")
        await saver.aprune(strategy="keep_latest", keep_last=1)
        await saver.adelete_for_runs(["no-such-run"])
        await saver.adelete_thread(thread + "-copy")
        latest = await saver.aget_tuple({"configurable": {"thread_id": thread}})
        assert latest is not None  # the kept checkpoint (and the deltas it needs) reads back
        assert latest.checkpoint["channel_values"]["items"] == ["n0", "n1", "n2", "n3"]
        assert await saver.aget_tuple({"configurable": {"thread_id": thread + "-copy"}}) is None
        started = [t.name for t in threading.enumerate() if t.ident not in before]
        assert started == []
        assert sync_pool.get_stats().get("requests_num", 0) == sync_requests
        assert saver.store.aio.checkouts > checkouts + 10  # type: ignore[attr-defined]
        assert saver._readers is None  # no executor made


async def test_a_callers_async_pool_is_used_and_left_open(postgres_url: str) -> None:
    from psycopg_pool import AsyncConnectionPool

    url = f"{postgres_url}?namespace=lg-{uuid.uuid4().hex[:10]}"
    pool = AsyncConnectionPool(postgres_url, kwargs={"autocommit": True}, open=False)
    await pool.open()
    try:
        async with RewindSaver(pool, namespace=url.rsplit("=", 1)[1]) as saver:
            await run_graph(saver)
            assert saver.store.aio._pools == {}  # type: ignore[attr-defined]
        assert pool.get_stats()["requests_num"] >= 8  # the puts, writes and reads
        assert not pool.closed
        async with pool.connection() as conn:
            await conn.execute("SELECT 1")
    finally:
        await pool.close()


@pytest.mark.parametrize("given", ["async_pool", "async_connection"])
async def test_conformance_on_a_callers_async_pool_or_connection(
    postgres_url: str, given: str
) -> None:
    import psycopg
    from psycopg_pool import AsyncConnectionPool

    from agentrewind.stores.postgres import PostgresStore

    pool = AsyncConnectionPool(postgres_url, kwargs={"autocommit": True}, open=False)
    await pool.open()
    conn = await psycopg.AsyncConnection.connect(postgres_url, autocommit=True)
    used = {"async_pool": pool, "async_connection": conn}[given]

    @checkpointer_test(name=f"RewindSaver[{given}]")
    async def factory() -> AsyncIterator[BaseCheckpointSaver[Any]]:
        ns = f"lg-{uuid.uuid4().hex[:6]}"
        store = PostgresStore(postgres_url, namespace=ns, **{given: used})
        saver = RewindSaver(store)
        try:
            yield saver
        finally:
            for thread in saver.backend.thread_ids():
                saver.delete_thread(thread)
            saver.close()
            store.close()

    try:
        before = pool.get_stats().get("requests_num", 0)
        report = await validate(factory)
        results = report.to_dict()["results"]
        assert [f for r in results.values() for f in r["failures"]] == []
        assert sum(r["tests_passed"] for r in results.values()) == 81
        if given == "async_pool":
            assert pool.get_stats()["requests_num"] - before > 81
        assert not conn.closed
    finally:
        await conn.close()
        await pool.close()


async def test_the_lease_fence_refuses_an_async_write_in_its_transaction(
    postgres_url: str,
) -> None:
    import time

    from agentrewind import LeaseLostError

    url = f"{postgres_url}?namespace=lg-{uuid.uuid4().hex[:10]}"
    thread = uuid.uuid4().hex
    config: Any = {"configurable": {"thread_id": thread}}
    async with (
        RewindSaver(url, lease=True, lease_ttl=0.3, defer_writes=False) as a,
        RewindSaver(url, lease=True) as b,
    ):
        await graph(a).ainvoke({"items": []}, config)
        leases = a._leases
        assert leases is not None and leases._keeper is not None
        leases._stop.set()  # A's process stops: nothing renews its lease
        leases._keeper.join()
        time.sleep(0.4)
        await graph(b).ainvoke({"items": []}, config)  # B takes it over
        latest = await a.aget_tuple(config)
        assert latest is not None
        before = [t.checkpoint["id"] async for t in b.alist(config)]
        # A stopped between its check and its write: the write's own transaction refuses.
        for write in ("aput", "aput_writes"):
            leases._lost.clear()
            leases._held[thread] = time.monotonic()
            with pytest.raises(LeaseLostError):
                if write == "aput":
                    await a.aput(latest.config, latest.checkpoint, latest.metadata, {})
                else:
                    await a.aput_writes(latest.config, [("items", ["late"])], "task-1")
            assert thread not in leases._held  # marked lost
        assert [t.checkpoint["id"] async for t in b.alist(config)] == before
        assert a._readers is None
        leases._held.clear()


async def test_the_async_pool_replaces_connections_the_server_dropped(postgres_url: str) -> None:
    import psycopg

    url = f"{postgres_url}?namespace=lg-{uuid.uuid4().hex[:10]}"
    async with RewindSaver(url, defer_writes=False) as saver:
        await run_graph(saver)
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
            cur = await admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            row = await cur.fetchone()
            assert row is not None and row[0] >= 1  # the saver's connections are gone
        await run_graph(saver)  # each operation runs once more on a fresh connection
