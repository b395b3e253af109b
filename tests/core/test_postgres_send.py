"""The typed array parameters and the one-cursor send of a transaction, on a real server."""

from __future__ import annotations

import asyncio

import pytest

from agentrewind.adapters import PostgresBytesArray, PostgresIntArray, PostgresTextArray

psycopg = pytest.importorskip("psycopg")
pytestmark = pytest.mark.postgres

from agentrewind.stores.postgres._flow import BigIntArray  # noqa: E402
from agentrewind.stores.postgres._send import asend, send  # noqa: E402  (needs psycopg)

CASES = [
    (PostgresTextArray(["a", "é ü 東", None, "", 'q"{,}\\']), "text[]"),
    (PostgresTextArray([]), "text[]"),
    (PostgresIntArray([1, -2, 0, 2**31 - 1, -(2**31)]), "int[]"),
    (PostgresIntArray([1, None, 3]), "int[]"),
    (PostgresIntArray([]), "int[]"),
    (BigIntArray([1, -2, 0, 2**63 - 1, -(2**63), 2**40]), "bigint[]"),
    (BigIntArray([1, None, 3]), "bigint[]"),
    (BigIntArray([]), "bigint[]"),
    (PostgresBytesArray([b"\x00\x01\xff", None, b""]), "bytea[]"),
    (PostgresBytesArray([]), "bytea[]"),
]


@pytest.mark.parametrize(("value", "cast"), CASES)
def test_typed_arrays_store_what_a_plain_list_stores(
    postgres_url: str, value: list[object], cast: str
) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        typed = conn.execute(f"SELECT %s::{cast}, pg_typeof(%s)::text", (value, value)).fetchone()
        plain = conn.execute(f"SELECT %s::{cast}", (list(value),)).fetchone()
        assert typed[0] == plain[0] == list(value)
        # dumped in binary with the array's type (not psycopg's generic list dumper)
        dumper = conn.adapters.get_dumper(type(value), psycopg.adapt.PyFormat.AUTO)
        assert dumper.format == psycopg.pq.Format.BINARY and dumper.oid != 0
        names = {"text[]": "text[]", "int[]": "integer[]", "bigint[]": "bigint[]"}
        assert typed[1] == names.get(cast, cast)
        rows = conn.execute(
            "SELECT * FROM unnest(%s::text[], %s::int[]) WITH ORDINALITY",
            (PostgresTextArray(["x", None]), PostgresIntArray([7, 8])),
        ).fetchall()
        assert rows == [("x", 7, 1), (None, 8, 2)]


def test_send_returns_the_rows_of_the_statement_asked_for(postgres_url: str) -> None:
    statements = [("SELECT 1", None), ("SELECT %s::int", (2,)), ("SELECT 3", None)]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        for at in (0, 1, 2):
            with conn.pipeline():
                cur = send(conn, statements, at)
            assert cur.fetchall() == [(at + 1,)]
            with conn.transaction():
                assert send(conn, statements, at).fetchall() == [(at + 1,)]

    async def main() -> list[object]:
        conn = await psycopg.AsyncConnection.connect(postgres_url, autocommit=True)
        async with conn:
            out = []
            for at in (0, 1, 2):
                async with conn.pipeline():
                    cur = await asend(conn, statements, at)
                out.append(await cur.fetchall())
            return out

    assert asyncio.run(main()) == [[(1,)], [(2,)], [(3,)]]


def test_a_failing_statement_in_the_pipeline_commits_nothing(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS send_probe (k int PRIMARY KEY)")
        conn.execute("DELETE FROM send_probe")
        with pytest.raises(psycopg.errors.UniqueViolation), conn.pipeline():
            send(conn, [("INSERT INTO send_probe VALUES (1)", None)] * 2, None)
        assert conn.execute("SELECT count(*) FROM send_probe").fetchone() == (0,)
        conn.execute("DROP TABLE send_probe")
