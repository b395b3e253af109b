"""PostgreSQL I/O written once: an operation is a generator of transactions (a `PgFlow`).

A flow yields `Txn`s (statements run as one transaction, in one pipeline) and receives each
one's rows; `drive` runs it on the sync pool, `_async.AsyncPostgres.adrive` on the event
loop's `psycopg_pool.AsyncConnectionPool`. Both apply the same per-transaction settings
(`PostgresDatabase._prefix`: lock_timeout, row-level security's namespace,
synchronous_commit) and the same error translation, so sync and async share one code path.
`drive_in_transaction` runs a whole flow as one transaction instead (maintenance work that
locks rows across statements). An error of a transaction is thrown into the flow (so a
wrapper such as the lease fence can name it) and, uncaught, out of the driver. Needs no
psycopg import (the adapters' API names it).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..._flowsteps import FlowSteps

__all__ = [
    "NOT_DURABLE",
    "BigIntArray",
    "BytesArray",
    "IntArray",
    "PgFlow",
    "TextArray",
    "Txn",
    "drive",
    "drive_in_transaction",
]

T = TypeVar("T")


@dataclass(frozen=True)
class Txn:
    """Statements run as one transaction (one pipeline: one round trip, one commit).

    Attributes:
        statements: `(sql, params)` pairs, in order.
        fetch: Index of the statement whose rows are the reply (None: the reply is []).
        write: False for a read (only the database's `settings` apply, never refused on a
            read-only store).
        guard: Run under `lock_timeout` even when it is a single statement.
        settings: More settings of this transaction only (`set_config(name, value, true)`),
            such as `NOT_DURABLE`.
    """

    statements: Sequence[tuple[str, Any]]
    fetch: int | None = None
    write: bool = True
    guard: bool = False
    settings: dict[str, str] | None = None


NOT_DURABLE = {"synchronous_commit": "off"}
"""`Txn.settings` of a write that need not wait for the WAL flush (see `Store.put_steps`)."""


class TextArray(list[str | None]):
    """A `text[]` parameter, dumped in binary with its type known (`_send`).

    psycopg's generic list dumper finds each call's element type in Python (most of a put's
    client time); a connection made before `_db` was imported dumps it as a plain list.
    """


class IntArray(list[int]):
    """An `int[]` (int4) parameter, dumped like `TextArray`."""


class BigIntArray(list[int]):
    """An `int8[]` (bigint) parameter, dumped like `TextArray`."""


class BytesArray(list[bytes | None]):
    """A `bytea[]` parameter, dumped like `TextArray`."""


PgFlow = Generator[Txn, list[Any], T]
"""An operation on PostgreSQL: yields `Txn`s, receives their rows, returns its result."""


def drive(db: Any, flow: PgFlow[T], *, read_only: bool = False, url: str = "") -> T:
    """Run `flow` on `db` (a `PostgresDatabase`), each transaction on a pooled connection."""
    steps = FlowSteps(flow)
    for item in steps:
        try:
            steps.value = db.call(lambda conn, t=item: run_txn(db, conn, t, read_only, url))
        except Exception as exc:
            steps.error = exc
    return steps.result


def drive_in_transaction(db: Any, conn: Any, flow: PgFlow[T]) -> T:
    """Run all of `flow` in one explicit transaction on `conn`.

    Rows one of its statements locks (`FOR UPDATE`) stay locked until the end: for
    maintenance operations that read, then write what they read. Its `Txn`s join the
    transaction (their settings are the transaction's, set first).
    """
    with db.transaction(conn):
        steps = FlowSteps(flow)
        for item in steps:
            steps.value = db.run_in(conn, item.statements, fetch=item.fetch)
        return steps.result


def run_txn(db: Any, conn: Any, txn: Txn, read_only: bool, url: str) -> list[Any]:
    """One `Txn` on a connection the caller holds (`PostgresDatabase.run_in`)."""
    if txn.write and read_only:
        from ...errors import StoreError

        raise StoreError(f"PostgreSQL store {url} was opened read-only")
    rows: list[Any] = db.run_in(
        conn, txn.statements, fetch=txn.fetch, write=txn.write, guard=txn.guard, local=txn.settings
    )
    return rows
