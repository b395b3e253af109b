"""PostgreSQL specifics: schema option, caller's pool/connection, fencing, reconnects, errors."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

import agentrewind
from agentrewind.errors import (
    LeaseLostError,
    SchemaVersionError,
    StoreError,
    StoreUnavailableError,
)
from agentrewind.records import site_json
from postgres_support import step as rec

psycopg = pytest.importorskip("psycopg")
pytestmark = pytest.mark.postgres


def ns() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def test_postgres_scheme_and_schema_option(postgres_url: str) -> None:
    schema = f"s_{uuid.uuid4().hex[:8]}"
    url = postgres_url.replace("postgresql://", "postgres://") + f"?schema={schema}"
    with agentrewind.connect(url) as store, agentrewind.connect(postgres_url) as public:
        store.put_step(rec("r", "a", 1))
        assert [s.key for s in store.load_steps("r")] == ["a"]
        assert public.load_steps("r") == []  # another schema, same namespace
        with psycopg.connect(postgres_url) as conn:
            tables = {
                r[0]
                for r in conn.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                    (schema,),
                )
            }
    assert {"ar_runs", "ar_steps", "ar_heads", "ar_leases", "ar_schema_version"} <= tables


def test_callers_pool_and_connection_stay_open(postgres_url: str) -> None:
    from psycopg_pool import ConnectionPool

    from agentrewind.stores.postgres import PostgresStore

    space = ns()
    with ConnectionPool(postgres_url, kwargs={"autocommit": True}, open=True) as pool:
        store = PostgresStore(pool=pool, namespace=space)
        store.put_step(rec("r", "a", 1))
        store.close()
        assert not pool.closed
        with psycopg.connect(postgres_url) as conn:  # not autocommit: the store copes
            other = PostgresStore(connection=conn, namespace=space)
            assert [s.key for s in other.load_steps("r")] == ["a"]
            other.put_step(rec("r", "b", 2))
            other.close()
            assert not conn.closed
    with agentrewind.connect(postgres_url, namespace=space) as store:
        assert [s.key for s in store.load_steps("r")] == ["a", "b"]


def test_fenced_write_applies_only_for_the_lease_holder(postgres_url: str) -> None:
    from agentrewind.stores.postgres import PostgresStore

    with agentrewind.connect(postgres_url, namespace=ns()) as store:
        assert isinstance(store, PostgresStore)
        store.begin_run("r")
        assert store.acquire_lease("r", "me", 30).acquired
        upsert = store.sql("UPSERT_STEPS")

        def step(key: str) -> tuple[str, dict[str, object]]:
            r = rec("r", key, 1)
            return upsert, {
                "ns": store.namespace, "runs_of": ["r"], "keys": [key], "ids": [r.step_id],
                "seqs": [1], "datas": [r.encode()], "sites": [site_json(r.site)],
            }  # fmt: skip

        store.write([store.fence_statement("r", "me"), step("a")])
        with pytest.raises(StoreError, match="no longer held"):
            store.write([store.fence_statement("r", "intruder"), step("b")])
        assert [s.key for s in store.load_steps("r")] == ["a"]


def test_dropped_connections_are_replaced(postgres_url: str) -> None:
    with agentrewind.connect(postgres_url, namespace=ns()) as store:
        store.put_step(rec("r", "a", 1))
        dbname = postgres_url.rsplit("/", 1)[1]
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (dbname,),
            )
        store.put_step(rec("r", "b", 2))  # the pool's dead connection is replaced
        assert [s.key for s in store.load_steps("r")] == ["a", "b"]


def test_a_busy_pool_is_waited_for_not_bypassed(postgres_url: str) -> None:
    # A pool that times out with every connection it may hold in use is busy, not unable to
    # connect (see _pg_starve): no connection beyond max_size is opened.
    url = f"{postgres_url}?max_size=1&connect_timeout=1"
    with agentrewind.connect(url, namespace=ns()) as store:
        store.put_step(rec("r", "a", 1))
        with store.db.connection():  # the pool's only connection
            with pytest.raises(StoreUnavailableError, match="PoolTimeout"):
                store.get_run("r")
            with pytest.raises(StoreUnavailableError, match="PoolTimeout"):
                store.get_run("r")
        assert store.get_run("r") is not None


def test_unreachable_server_is_a_named_error() -> None:
    t = time.monotonic()
    with pytest.raises(StoreUnavailableError, match="unreachable"):
        agentrewind.connect("postgresql://postgres:secret@127.0.0.1:1/x?connect_timeout=1")
    assert time.monotonic() - t < 10


def test_newer_schema_is_refused_unchanged(postgres_url: str) -> None:
    schema = f"s_{uuid.uuid4().hex[:8]}"
    agentrewind.connect(f"{postgres_url}?schema={schema}").close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'UPDATE "{schema}".ar_schema_version SET version = 99')
    with pytest.raises(SchemaVersionError, match="version 99"):
        agentrewind.connect(f"{postgres_url}?schema={schema}")


def test_no_session_state_and_opt_in_durability(postgres_url: str) -> None:
    from agentrewind.stores.postgres import PostgresStore

    store = agentrewind.connect(
        f"{postgres_url}?durability=normal&max_size=2&prepare_threshold=none", namespace=ns()
    )
    assert isinstance(store, PostgresStore)
    try:
        for i in range(10):
            store.put_step(rec("r", f"k{i}", i))
            store.get_run("r")

        def session_state(conn: object) -> tuple[int, str]:
            c = conn.execute  # type: ignore[attr-defined]
            return (
                c("SELECT count(*) FROM pg_prepared_statements").fetchone()[0],
                c("SHOW synchronous_commit").fetchone()[0],
            )

        prepared, sync = store.db.call(session_state)
        assert prepared == 0  # old PgBouncer transaction mode: nothing prepared
        assert sync == "on"  # SET LOCAL only: the session keeps the server default
        show = [("SELECT current_setting('synchronous_commit')", None)]
        assert store.write(show, fetch=0) == [("off",)]  # inside each write transaction
        assert store.db.fetchall(show[0][0]) == [("on",)]  # not in reads, nor after
        assert len(store.load_steps("r")) == 10
    finally:
        store.close()


def test_bad_schema_name_is_refused() -> None:
    from agentrewind.stores.postgres import PostgresStore

    with pytest.raises(ValueError, match="plain SQL name"):
        PostgresStore("postgresql://x/y", schema='a"; DROP TABLE x; --')


def test_writing_to_an_expired_run_starts_it_afresh_in_one_statement(postgres_url: str) -> None:
    from agentrewind import RunMetrics

    with agentrewind.connect(postgres_url, namespace=ns()) as store:
        store.begin_run("r", ttl=0.1)
        store.put_steps([rec("r", "a", 1), rec("r", "b", 2)], heads={"main": "id-b"})
        store.end_run("r", "failed", RunMetrics(steps=2, failures=1))
        created = store.get_run("r").created_at  # type: ignore[union-attr]
        time.sleep(0.25)
        assert store.get_run("r") is None
        store.put_step(rec("r", "a", 7))  # a key the expired run had: replaced, not kept
        assert [(s.key, s.seq) for s in store.load_steps("r")] == [("a", 7)]
        assert store.get_heads("r") == {}
        info = store.get_run("r")
        # written as `running` by nobody holding its lease: listed as `crashed`
        assert info is not None and info.status == "crashed" and info.expires_at is None
        assert info.metrics == RunMetrics() and info.created_at > created
        store.begin_run("r", ttl=0.1)
        time.sleep(0.25)
        assert store.begin_run("r").metrics == RunMetrics()
        assert store.load_steps("r") == []


def test_cli_views_open_postgres_read_only() -> None:
    """`runs`/`show`/`log` on a database where every write fails: they work, create nothing."""
    from cli_support import batch
    from postgres_support import create_scratch_database, drop_scratch_database

    url, name = create_scratch_database()
    try:
        with agentrewind.connect(url) as store:
            store.begin_run("r")
            store.put_step(rec("r", "a", 1))
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
        runs, log, missing = batch(
            ["--store", url, "runs"],
            ["--store", url, "log", "r"],
            ["--store", f"{url}?schema=nothing_here", "runs"],
        )
        assert runs.code == 0 and "r " in runs.out, runs.err
        assert log.code == 0 and "a" in log.out, log.err
        assert missing.code == 3 and "holds no agentrewind store" in missing.err
        assert "nothing was created" in missing.err
        with psycopg.connect(url) as conn:
            schemas = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = 'nothing_here'")
            assert schemas.fetchone() is None
        from agentrewind.stores.postgres import PostgresStore

        ro = PostgresStore(url, read_only=True)
        try:
            with pytest.raises(StoreError, match="read-only"):
                ro.begin_run("x")
        finally:
            ro.close()
    finally:
        drop_scratch_database(name)


def test_a_failed_transaction_leaves_its_connection_usable(postgres_url: str) -> None:
    # durability=normal makes every write a two-statement pipeline (set_config first)
    with agentrewind.connect(f"{postgres_url}?durability=normal&max_size=1", namespace=ns()) as s:
        s.begin_run("r")
        assert s.acquire_lease("r", "holder", 30).acquired
        for _ in range(3):  # the one pooled connection each time
            with pytest.raises(LeaseLostError):
                s.put_step(rec("r", "a", 1), owner="intruder")
            s.put_step(rec("r", "b", 2), owner="holder")
        assert [r.key for r in s.load_steps("r")] == ["b"]
        status = s.db.call(lambda conn: conn.info.transaction_status.name)  # type: ignore[attr-defined]
        assert status == "IDLE"


def test_a_journal_write_touches_the_run_row_only_when_the_order_would_change(
    postgres_url: str,
) -> None:
    with agentrewind.connect(postgres_url, namespace=ns()) as s:
        sql = s.render(
            "SELECT xmin::text, updated_at FROM {s}.ar_runs WHERE ns = %s AND run_id = %s"
        )  # type: ignore[attr-defined]

        def row(run: str) -> tuple[str, float]:
            return s.db.fetchone(sql, (s.namespace, run))  # type: ignore[attr-defined,no-any-return]

        s.put_step(rec("a", "k1", 1))
        first = row("a")
        t = time.monotonic()
        s.put_step(rec("a", "k2", 2))  # within 0.1 s, and "a" is the newest run: row left alone
        assert row("a") == first or time.monotonic() - t > 0.09
        s.put_step(rec("b", "k1", 1))
        s.put_step(rec("a", "k3", 3))  # "b" is newer now: "a" is touched, the order stays exact
        assert row("a")[1] > first[1]
        assert [r.run_id for r in s.list_runs()] == ["a", "b"]
        time.sleep(0.15)
        before = row("a")
        s.put_step(rec("a", "k4", 4))  # more than 0.1 s later: touched
        assert row("a")[1] > before[1]
        assert [r.key for r in s.load_steps("a")] == ["k1", "k2", "k3", "k4"]


def test_a_client_side_error_mid_pipeline_writes_nothing(postgres_url: str) -> None:
    """A parameter psycopg cannot send, after statements already queued: all rolled back."""
    with agentrewind.connect(postgres_url, namespace=ns(), max_size=1) as s:
        s.begin_run("r")
        sql = s.render(  # type: ignore[attr-defined]
            "UPDATE {s}.ar_runs SET status = %s WHERE ns = %s AND run_id = 'r'"
        )
        with pytest.raises(UnicodeEncodeError):
            s.write([(sql, ("ended", s.namespace)), (sql, ("bad\ud800", s.namespace))])  # type: ignore[attr-defined]
        info = s.get_run("r")
        assert info is not None and info.status != "ended"  # the first UPDATE rolled back too
        status = s.db.call(lambda conn: conn.info.transaction_status.name)  # type: ignore[attr-defined]
        assert status == "IDLE"


def _threads_of(store: Any) -> list[str]:
    """What `store` does on its sync pool from now on, in a worker thread or not (appended):
    the functions it hands to `_in_thread`, and each sync database call (`db.call`)."""
    threaded: list[str] = []
    in_thread, call = store._in_thread, store.db.call

    async def spy(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        threaded.append(fn.__name__)
        return await in_thread(fn, *args, **kwargs)

    def sync_call(fn: Any) -> Any:
        threaded.append("db.call")
        return call(fn)

    store._in_thread = spy
    store.db.call = sync_call
    return threaded


async def test_async_journal_writes_run_on_the_async_pool_not_in_a_thread(
    postgres_url: str,
) -> None:
    """`aput_steps` / `aset_head` are flows on the loop's async pool, fenced as the sync ones."""
    mw = agentrewind.Middleware(f"{postgres_url}?namespace={ns()}")
    store = mw.store
    threaded = _threads_of(store)

    async def work(i: int) -> int:
        return i * 2

    try:
        async with mw.run("r") as run:  # the open too: lease, run row, journal
            assert threaded == []
            checkouts = store.aio.checkouts  # type: ignore[attr-defined]
            assert [await run.step("work", work, i) for i in range(5)] == [0, 2, 4, 6, 8]
            assert threaded == []
            # started + completed per step, each one transaction on the async pool
            assert store.aio.checkouts == checkouts + 10  # type: ignore[attr-defined]
            await store.aset_head("r", "main", "id-x", owner=run.owner)
            assert await store.aget_heads("r") == {"main": "id-x"}
            await store.aset_head("r", "main", None, owner=run.owner)
            assert await store.aget_heads("r") == {}
            assert threaded == []
            with pytest.raises(LeaseLostError, match=r"lost its lease \(someone-else\) to"):
                await store.aput_step(rec("r", "stale", 99), owner="someone-else")
            assert threaded == []  # the refusal was named from reads on the async pool too
        assert [s.status for s in await store.aload_steps("r")] == ["completed"] * 5
        async with mw.run("r") as run:  # replayed: nothing runs again
            assert [await run.step("work", work, i) for i in range(5)] == [0, 2, 4, 6, 8]
            assert run.metrics.replay_hits == 5
        assert threaded == []  # opened, closed and replayed without a worker thread
    finally:
        await store.aclose_async()  # type: ignore[attr-defined]
        mw.close()


async def test_async_runs_reads_and_leases_run_on_the_async_pool_not_in_a_thread(
    postgres_url: str,
) -> None:
    """A run's whole async life (begin, lease, steps, heads, TTL, end) uses no thread."""
    from agentrewind.records import RunMetrics

    store = agentrewind.connect(f"{postgres_url}?namespace={ns()}")
    threaded = _threads_of(store)
    a, b = "host-a:1:x", "host-b:2:y"
    try:
        assert (await store.abegin_run("r")).status == "running"
        assert (await store.aacquire_lease("r", a, 30.0)).acquired
        refused = await store.aacquire_lease("r", b, 30.0)
        assert not refused.acquired and refused[1] == a
        assert (await store.arenew_lease("r", a, 30.0)).acquired
        assert not (await store.arenew_lease("r", b, 30.0)).acquired
        await store.aput_step(rec("r", "k", 1), owner=a)
        assert [s.key for s in await store.aload_steps("r")] == ["k"]
        step = await store.aget_step("r", "id-k")
        assert step is not None and step.output == 1
        await store.aset_head("r", "main", "id-k", owner=a)
        assert await store.aget_heads("r") == {"main": "id-k"}
        await store.aset_ttl("r", 3600.0, owner=a)
        run = await store.aget_run("r")
        assert run is not None and run.status == "running" and run.expires_at is not None
        assert [r.run_id for r in await store.alist_runs()] == ["r"]
        with pytest.raises(LeaseLostError):
            await store.aend_run("r", "completed", RunMetrics(), owner=b)
        await store.aend_run("r", "completed", RunMetrics(steps=1), owner=a)
        await store.arelease_lease("r", a)
        done = await store.aget_run("r")
        assert done is not None and done.status == "completed" and done.metrics.steps == 1
        assert (await store.aacquire_lease("r", b, 30.0)).acquired  # released: b takes it
        assert await store.aget_run("missing") is None
        assert await store.aload_steps("missing") == []
        assert threaded == []
        # the sync API reads the same rows
        assert store.get_heads("r") == {"main": "id-k"}
        assert [s.key for s in store.load_steps("r")] == ["k"]
    finally:
        await store.aclose_async()  # type: ignore[attr-defined]
        store.close()
