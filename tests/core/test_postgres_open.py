"""Opening a long run on PostgreSQL: from the steps' index entries (`site`, schema version 3).

The open reads each step's key, entry and seq, no record: a record is decoded, and its checksum
verified, on its replay hit. Rows written before version 3 have no entry and are indexed from
their records (checksums verified at the open); a read-only store on version-2 tables reads
them as they are.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import pytest

import agentrewind
from agentrewind import CorruptRecordError, Middleware
from agentrewind.records import INDEX_FROM, StepIndex
from agentrewind.stores.postgres import PostgresStore
from agentrewind.stores.postgres._sql import PG_SCHEMA_VERSION

psycopg = pytest.importorskip("psycopg")
pytestmark = pytest.mark.postgres

STEPS = INDEX_FROM + 500


@pytest.fixture
def schema(postgres_url: str) -> Iterator[str]:
    name = f"open_{uuid.uuid4().hex[:8]}"
    yield name
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def _record(url: str, n: int = STEPS) -> None:
    with closing(Middleware(url)) as mw, mw.run("long") as run:
        for i in range(n):
            run.step("work", lambda i: {"answer": i}, i)


def _sql(postgres_url: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


def _alter_output(postgres_url: str, schema: str, answer: int) -> tuple[str, bytes]:
    """Change one record's stored output (its checksum no longer matches): (key, old bytes)."""
    old = f'"answer":{answer}}}'.encode()
    ((key, data),) = _sql(
        postgres_url,
        f'''SELECT key, data FROM "{schema}".ar_steps WHERE position(%s IN data) > 0''',
        (old,),
    )
    new = data.replace(old, f'"answer":{answer + 1}}}'.encode())
    _sql(postgres_url, f'UPDATE "{schema}".ar_steps SET data = %s WHERE key = %s', (new, key))
    return key, bytes(data)


def _async_index(store: Any) -> Any:
    """`store._aload_index("long")` on a loop of its own (its async pool closed after)."""

    async def read() -> Any:
        try:
            return await store._aload_index("long")
        finally:
            await store.aclose_async()

    return asyncio.run(read())


def _same_index(got: Any, index: StepIndex) -> None:
    assert isinstance(got, StepIndex) and got.sites == index.sites
    assert (got.seq, got.last_step_id) == (index.seq, index.last_step_id)


def test_a_long_run_opens_without_reading_a_record(postgres_url: str, schema: str) -> None:
    url = f"{postgres_url}?schema={schema}"
    _record(url)
    with agentrewind.connect(url) as store:
        assert isinstance(store, PostgresStore)
        args = {"ns": store.namespace, "run": "long", "short": INDEX_FROM}
        rows = store.db.fetchall(store.sql("LOAD_INDEX"), args)
        assert len(rows) == STEPS
        assert {r[3] for r in rows} == {None}  # no record crossed the wire
        assert {r[1] for r in rows} == {'["custom","work",true]'}
        index = store._load_index("long")
        assert isinstance(index, StepIndex) and len(index.sites) == STEPS
        last = max(store.load_steps("long"), key=lambda r: r.seq)
        assert (index.seq, index.last_step_id) == (last.seq, last.step_id)
        _same_index(_async_index(store), index)  # the same flow on the async pool
    # Proof that the open reads no record: an altered one lets the run open; its hit refuses.
    _alter_output(postgres_url, schema, 7)
    with closing(Middleware(url)) as mw, mw.run("long") as run:
        assert run._indexed
        assert run.step("work", lambda i: {"answer": -1}, 6) == {"answer": 6}
        with pytest.raises(CorruptRecordError, match="checksum"):
            run.step("work", lambda i: {"answer": -1}, 7)


def test_a_short_run_still_opens_with_every_record_decoded(postgres_url: str, schema: str) -> None:
    url = f"{postgres_url}?schema={schema}"
    _record(url, n=5)
    with agentrewind.connect(url) as store:
        journal = store._load_index("long")  # type: ignore[attr-defined]
        assert isinstance(journal, list) and [r.output for r in journal] == [
            {"answer": i} for i in range(5)
        ]
        ajournal = _async_index(store)
        assert [r.output for r in ajournal] == [r.output for r in journal]


def _as_version_2(postgres_url: str, schema: str) -> None:
    """The tables as agentrewind wrote them before version 3: no `site` column."""
    _sql(postgres_url, f'ALTER TABLE "{schema}".ar_steps DROP COLUMN site')
    _sql(postgres_url, f'UPDATE "{schema}".ar_schema_version SET version = 2')


def test_runs_written_before_version_3_still_open(postgres_url: str, schema: str) -> None:
    url = f"{postgres_url}?schema={schema}"
    _record(url)
    _as_version_2(postgres_url, schema)

    # Read-only: the tables are left at version 2 and read as they are.
    with PostgresStore(postgres_url, schema=schema, read_only=True) as store:
        assert store.schema_version == 2
        index = store._load_index("long")
        assert isinstance(index, StepIndex) and len(index.sites) == STEPS
        _same_index(_async_index(store), index)  # records read, then the last step's id
    columns = f"""SELECT column_name FROM information_schema.columns
        WHERE table_schema = '{schema}' AND table_name = 'ar_steps'"""
    assert "site" not in {c for (c,) in _sql(postgres_url, columns)}

    # A writer migrates (the rows keep no entry) and the run opens from its records, so an
    # altered record refuses the open, as it did before.
    key, data = _alter_output(postgres_url, schema, 7)
    with agentrewind.connect(url) as store:
        assert store.schema_version == PG_SCHEMA_VERSION == 4  # type: ignore[attr-defined]
    assert "site" in {c for (c,) in _sql(postgres_url, columns)}
    with (
        closing(Middleware(url)) as mw,
        pytest.raises(CorruptRecordError, match="checksum"),
        mw.run("long"),
    ):
        pytest.fail("an altered record must refuse an open indexed from the records")
    _sql(postgres_url, f'UPDATE "{schema}".ar_steps SET data = %s WHERE key = %s', (data, key))

    # The old rows replay; new steps get entries; the run (old rows and new) opens again
    # and replays every step.
    _record(url, n=STEPS + 10)
    nulls = _sql(postgres_url, f'SELECT count(*) FROM "{schema}".ar_steps WHERE site IS NULL')
    assert nulls == [(STEPS,)]
    with closing(Middleware(url)) as mw, mw.run("long") as run:
        assert run._indexed
        for i in range(STEPS + 10):
            assert run.step("work", lambda i: {"answer": -1}, i) == {"answer": i}
        assert run.metrics.replay_hits == STEPS + 10 and run.metrics.steps == 0


@pytest.mark.parametrize("name", ["information_schema", "pg_catalog", "PG_TOAST", "a-b", "x;y"])
def test_a_reserved_or_bad_schema_name_is_a_named_error(postgres_url: str, name: str) -> None:
    with pytest.raises(agentrewind.StoreConfigError, match="schema") as caught:
        agentrewind.connect(f"{postgres_url}?schema={name}")
    assert isinstance(caught.value, ValueError)  # what it raised before, still caught


def test_connections_carry_keepalives_and_a_tcp_user_timeout(postgres_url: str) -> None:
    with closing(agentrewind.connect(f"{postgres_url}?deadline=12")) as store:
        assert isinstance(store, PostgresStore)
        with store.db.pool.connection() as conn:
            dsn = dict(p.split("=", 1) for p in conn.info.dsn.split() if "=" in p)
    assert dsn["keepalives"] == "1" and dsn["keepalives_idle"] == "30"
    assert dsn["tcp_user_timeout"] == "12000"  # the deadline, in ms
    # What the URL sets is the user's: kept as given.
    with closing(agentrewind.connect(f"{postgres_url}?keepalives_idle=7")) as store:
        assert isinstance(store, PostgresStore)
        with store.db.pool.connection() as conn:
            assert "keepalives_idle=7" in conn.info.dsn.split()
