"""Async PostgreSQL: a `psycopg_pool.AsyncConnectionPool` per event loop, and `adrive`.

The async twin of `_db.PostgresDatabase.call` / `run_in` for `PgFlow` operations (see
`_flow`): no thread, the statements and per-transaction settings are the sync path's.
The pool is opened lazily on first use in a loop (the store's `max_size` and
`prepare_threshold`, autocommit connections) and closed by `aclose` (this loop's) or
`close_now` (the others'). A caller's own `AsyncConnectionPool` (any loop: it is bound to
the one it runs in) or `AsyncConnection` (used under an `asyncio.Lock`, its transactions
explicit) is used instead and left open.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import psycopg
from psycopg_pool import PoolTimeout

from ..._flowsteps import FlowSteps
from ...errors import StoreError
from ._apool import OwnAsyncPool
from ._db import PostgresDatabase
from ._flow import PgFlow, Txn
from ._send import asend

__all__ = ["AsyncPostgres"]

T = TypeVar("T")


class AsyncPostgres:
    """The async side of one `PostgresDatabase`."""

    def __init__(self, db: PostgresDatabase, *, pool: Any = None, connection: Any = None) -> None:
        self.db = db
        self._user_pool = pool
        self._conn = connection
        self._conn_lock: asyncio.Lock | None = None
        self._pools: dict[asyncio.AbstractEventLoop, OwnAsyncPool] = {}
        self.checkouts = 0
        """Connections taken for a transaction (tests count them)."""
        self.native = bool(pool is not None or connection is not None or db.conninfo)
        """Whether this side can reach the server (else the store runs its flows in a thread)."""

    async def _pool(self) -> Any:
        if self._user_pool is not None:
            return self._user_pool
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is None:
            for old in [lp for lp in self._pools if lp.is_closed()]:
                self._pools.pop(old)
            if not self.db.conninfo:
                raise StoreError(
                    "async use of a PostgreSQL store opened on a caller's sync connection "
                    "needs its URL, an AsyncConnectionPool or an AsyncConnection"
                )
            pool = self._pools[loop] = OwnAsyncPool(
                self.db.conninfo,
                min_size=1,
                max_size=self.db.max_size,
                kwargs=self.db.connect_kwargs(),
                timeout=self.db.connect_timeout,
                open=False,
                name=f"{self.db.outages.name}-async",
            )
            await pool.open(wait=False)
        return pool

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Any]:
        """An async connection for one transaction (pooled, or the caller's under a lock)."""
        ours = self._user_pool is None and self._conn is None
        quiet = self.db.outages.active() if ours else contextlib.nullcontext()
        with quiet:
            async with self._connection() as conn:
                yield conn

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[Any]:
        if self.db._closed:
            raise StoreError(f"PostgreSQL store {self.db.url} is closed")
        self.checkouts += 1
        start = time.monotonic()
        if self._conn is not None:
            if self._conn_lock is None:
                self._conn_lock = asyncio.Lock()
            async with self._conn_lock:
                with self.db.watched(self._conn, start) as conn:
                    yield conn
            return
        pool, taken = await self._pool(), False
        if not self.db.starving.starved(pool):  # (see _starve)
            try:
                wait = self.db.deadlines.wait(self.db.connect_timeout)
                async with pool.connection(timeout=wait) as conn:
                    taken = True
                    with self.db.starving.holding(pool), self.db.watched(conn, start):
                        yield conn
                return
            except PoolTimeout:
                if taken or self._user_pool is not None or not self.db.starving.starve(pool):
                    raise
        with contextlib.suppress(Exception):
            await pool.check()
        async with await psycopg.AsyncConnection.connect(
            self.db.conninfo, **self.db.direct_kwargs(self.db.deadlines.left(start))
        ) as conn:
            with self.db.watched(conn, start):
                yield conn

    async def run(self, txn: Txn, *, read_only: bool = False) -> list[Any]:
        """One transaction; a dropped connection is replaced and it runs once more."""
        if txn.write and read_only:
            raise StoreError(f"PostgreSQL store {self.db.url} was opened read-only")
        for attempt in (0, 1, 2):
            try:
                async with self.connection() as conn:
                    return await self._run_in(conn, txn)
            except Exception as exc:
                if self.db.retry(exc, attempt, own=self._conn is None) == "dropped":
                    with contextlib.suppress(Exception), self.db.outages.active():
                        await (await self._pool()).check()
        raise AssertionError("unreachable")  # pragma: no cover

    async def adrive_in_transaction(self, make: Callable[[], PgFlow[T]]) -> T:
        """Async twin of `_flow.drive_in_transaction`: the flow `make()` as one transaction.

        The flow is made again when it runs again (`PostgresDatabase.retry`, as the sync one).
        """
        db = self.db
        for attempt in (0, 1, 2):
            try:
                async with self.connection() as conn, conn.transaction():
                    prefix = db._prefix(True, True, None)
                    if prefix is not None:
                        await conn.execute(*prefix)
                    steps = FlowSteps(make())
                    for item in steps:
                        cur = await asend(conn, item.statements, item.fetch)
                        steps.value = [] if item.fetch is None else await cur.fetchall()
                    return steps.result
            except Exception as exc:
                if db.retry(exc, attempt, own=self._conn is None) == "dropped":
                    with contextlib.suppress(Exception):
                        await (await self._pool()).check()
        raise AssertionError("unreachable")  # pragma: no cover

    async def _run_in(self, conn: Any, txn: Txn) -> list[Any]:
        """`PostgresDatabase.run_in` on an async connection (same prefix, same pipeline)."""
        pooled = conn.autocommit and self._conn is None
        full, at, how = self.db.plan(
            txn.statements, txn.fetch, txn.write, txn.guard, txn.settings, conn.autocommit, pooled
        )
        if how == "single":
            cur = await conn.execute(*full[0])
            return [] if at is None else list(await cur.fetchall())
        if how == "pipeline":
            async with conn.pipeline():
                try:
                    cur = await asend(conn, full, at)
                except BaseException:
                    with contextlib.suppress(Exception):
                        await conn.execute("ROLLBACK")
                    raise
        else:
            async with conn.transaction():
                cur = await asend(conn, full, at)
        return [] if at is None else list(await cur.fetchall())

    async def adrive(self, flow: PgFlow[T], *, read_only: bool = False) -> T:
        """Run `flow` on this event loop's pool; returns its result."""
        steps = FlowSteps(flow)
        for item in steps:
            try:
                steps.value = await self.run(item, read_only=read_only)
            except Exception as exc:
                steps.error = exc
        return steps.result

    async def aclose(self) -> None:
        """Close the pool this object opened for the running loop."""
        pool = self._pools.pop(asyncio.get_running_loop(), None)
        if pool is not None:
            await pool.close(timeout=1.0)

    def close_now(self) -> None:
        """Forget every loop's pool (from the sync `close`): a running loop closes its own."""
        pools, self._pools = self._pools, {}
        for loop, pool in pools.items():
            if loop.is_closed():
                continue  # its tasks went with it
            if loop.is_running():  # in its own thread: hand it the close
                with contextlib.suppress(RuntimeError):
                    asyncio.run_coroutine_threadsafe(pool.close(timeout=1.0), loop)
            elif asyncio._get_running_loop() is None and pool.thread == threading.get_ident():
                # A stopped loop of this thread (an async test's, between its run and its
                # close): run the close on it here, or its pool's pending tasks die with an
                # error at exit. Another thread's stopped loop (its `asyncio.run` ending) is
                # left to that thread, which cancels the pool's tasks (they end: `_apool`).
                with contextlib.suppress(Exception):
                    loop.run_until_complete(pool.close(timeout=1.0))
