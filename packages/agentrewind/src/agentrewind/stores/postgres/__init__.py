"""The PostgreSQL store (psycopg 3, psycopg_pool): the store, its SQL, leases and I/O.

An operation is a flow (a generator yielding `Txn`s run as one transaction in one pipeline),
run by `PostgresStore.drive` on the sync pool or `adrive` on the loop's async pool. Importing
this package does not import `psycopg`; `PostgresStore` loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._flow import BytesArray, IntArray, PgFlow, TextArray, Txn

if TYPE_CHECKING:
    from .store import PostgresStore

__all__ = ["BytesArray", "IntArray", "PgFlow", "PostgresStore", "TextArray", "Txn"]


def __getattr__(name: str) -> Any:
    if name == "PostgresStore":
        from .store import PostgresStore

        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
