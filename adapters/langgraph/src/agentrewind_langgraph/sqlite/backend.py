"""SQLite backend of `RewindSaver`: `lg_` tables in the store's database file.

Writes from sync callers run on the calling thread under an in-process lock (so threads of
one process never sleep in SQLite's busy handler); writes from async callers go to one writer
thread. Both commit with group commit: whoever takes the lock commits every write queued by
then in one transaction. Reads use each thread's own connection, so they never wait behind a
writer (WAL). The transactions are in `writes`, the queries in `reads`.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from agentrewind.adapters import SchemaVersionError, SQLiteDatabase, apply_migrations

from . import sql as _sql
from .reads import SQLiteReads
from .writes import SQLiteWrites, Txn

__all__ = ["SQLiteBackend"]

T = TypeVar("T")
_MAX_BATCH = 64
"""Most write operations committed in one transaction."""


class _SharedConnection(SQLiteDatabase):
    """The store's file with one connection for every thread's writes.

    LangGraph calls `put`/`put_writes` from short-lived executor threads: a connection per
    thread would open (and keep) a new one for nearly every graph run. Callers serialise
    their use with the backend's lock.
    """

    def __init__(self, db: SQLiteDatabase) -> None:
        super().__init__(
            db.path,
            durability=db.durability,
            busy_timeout=db.busy_timeout,
            retries=db.retries,
            # Only read-only CLI stores pass it (a core without `read_only` never has one).
            **({"read_only": True} if getattr(db, "read_only", False) else {}),
        )
        self._shared: sqlite3.Connection | None = None

    def connection(self) -> sqlite3.Connection:
        """The one shared connection, opened on first use."""
        if self._shared is None:
            self._shared = super().connection()
        return self._shared


class SQLiteBackend(SQLiteWrites, SQLiteReads):
    """The `lg_` tables of one SQLite store namespace."""

    def __init__(self, store: Any, *, tombstone_ttl: float) -> None:
        self.store = store
        self.db = store.db
        self._wdb = _SharedConnection(store.db)
        self.ns: str = store.namespace
        self.tombstone_ttl = tombstone_ttl
        self._lock = threading.Lock()
        self._pending: collections.deque[tuple[Txn[Any], concurrent.futures.Future[Any]]]
        self._pending = collections.deque()
        self._wake: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._writer_lock = threading.Lock()
        self._touched: dict[str, float] = {}
        self._known_runs: set[tuple[str, str]] = set()
        self._staged: list[Callable[[], None]] = []
        if not getattr(store.db, "read_only", False):  # a read-only CLI store: tables exist
            self.migrate()

    # -- schema ------------------------------------------------------------------------------
    def migrate(self) -> None:
        """Create or upgrade the `lg_` tables; refuse a newer layout."""

        def too_new(current: int) -> SchemaVersionError:
            return SchemaVersionError(
                f"{self.db.path}: LangGraph tables have schema version {current}; this "
                f"agentrewind-langgraph knows up to {_sql.SCHEMA_VERSION}: upgrade it"
            )

        with self.write() as conn:
            apply_migrations(
                conn, "lg_schema_version", _sql.MIGRATIONS, _sql.SCHEMA_VERSION, too_new
            )

    # -- write paths -------------------------------------------------------------------------
    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One `BEGIN IMMEDIATE` transaction, serialised with this process's other writers."""
        with self._lock, self._committing() as conn:
            yield conn

    @contextlib.contextmanager
    def _committing(self) -> Iterator[sqlite3.Connection]:
        """One transaction on the write connection (holding `_lock`); then its `_staged` hooks."""
        self._staged.clear()
        try:
            with self._wdb.write() as conn:
                yield conn
        except BaseException:
            self._staged.clear()
            raise
        staged, self._staged = self._staged, []
        for fn in staged:
            fn()

    def execute(self, txn: Txn[T]) -> T:
        """Run a write operation from a sync caller; returns once it is committed.

        Group commit without a hop to another thread: the caller that takes the lock commits
        every operation queued by then (its own and those of threads that arrived while the
        previous transaction ran) in one transaction; the others find theirs done.
        """
        if not self._pending and self._lock.acquire(blocking=False):
            try:  # nobody writing: no future, no queue
                if not self._pending:
                    return self._commit_first(txn)
                fut = self._enqueue(txn)  # queued meanwhile: keep the order
                self._commit_pending()
                return fut.result()
            finally:
                self._lock.release()
        fut = self._enqueue(txn)
        with self._lock:
            if not fut.done():
                self._commit_pending()
        return fut.result()

    async def aexecute(self, txn: Txn[T]) -> T:
        """Run a write operation from async code, on the group-committing writer thread."""
        return await asyncio.wrap_future(self.submit(txn))

    def submit(self, txn: Txn[T]) -> concurrent.futures.Future[T]:
        """Queue `txn(conn)` for the writer thread (group commit); returns its future."""
        fut = self._enqueue(txn)
        if self._writer is None:
            with self._writer_lock:
                if self._writer is None:
                    self._writer = threading.Thread(
                        target=self._write_loop, name="agentrewind-lg-writer", daemon=True
                    )
                    self._writer.start()
        self._wake.put(True)
        return fut

    def _enqueue(self, txn: Txn[T]) -> concurrent.futures.Future[T]:
        fut: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._pending.append((txn, fut))
        return fut

    def _write_loop(self) -> None:
        while self._wake.get():
            with self._lock:
                self._commit_pending()

    def _commit_pending(self) -> None:
        """Commit the queued operations, up to `_MAX_BATCH` per transaction (holding `_lock`)."""
        while self._pending:
            txn, fut = self._pending.popleft()
            try:
                value = self._commit_first(txn)
            except BaseException as exc:
                fut.set_exception(exc)
            else:
                fut.set_result(value)

    def _commit_first(self, txn: Txn[T]) -> T:
        """Commit `txn` with the operations queued while it runs (holding `_lock`); its result.

        One transaction for all of them, without savepoints; if it fails, each operation runs
        again in a transaction of its own, so one bad operation fails alone.
        """
        batch: list[tuple[Txn[Any], concurrent.futures.Future[Any]]] = []
        results: list[Any] = []

        def run(conn: sqlite3.Connection) -> T:
            value = txn(conn)
            while self._pending and len(batch) < _MAX_BATCH - 1:
                batch.append(self._pending.popleft())
                results.append(batch[-1][0](conn))
            return value

        try:
            value = self._transact(run)
        except BaseException:
            if not batch:
                raise
            alone: concurrent.futures.Future[T] = concurrent.futures.Future()
            self._commit_alone(txn, alone)
            for op in batch:
                self._commit_alone(*op)
            return alone.result()
        for (_, fut), result in zip(batch, results, strict=True):
            fut.set_result(result)
        return value

    def _commit_alone(self, txn: Txn[T], fut: concurrent.futures.Future[T]) -> None:
        try:
            value = self._transact(txn)
        except BaseException as exc:
            fut.set_exception(exc)
        else:
            fut.set_result(value)

    def _transact(self, txn: Txn[T]) -> T:
        """Run `txn` in one transaction on the write connection (holding `_lock`).

        Then its `_staged` hooks: `_committing` without its two context managers (hot path).
        """
        db = self._wdb
        conn = db.connection()
        self._staged.clear()
        joined = conn.in_transaction  # inside `write()`: join it, as `_committing` does
        if not joined:
            db.begin(conn)
        try:
            value = txn(conn)
            if not joined:
                conn.execute("COMMIT")
        except BaseException as exc:
            self._staged.clear()
            if joined:
                raise
            raise db.aborted(conn, exc)  # noqa: B904 (`aborted` chains `exc`)
        staged, self._staged = self._staged, []
        for hook in staged:
            hook()
        return value

    def close(self) -> None:
        """Stop the writer thread (after it drains its queue)."""
        if self._writer is not None:
            self._wake.put(False)
            self._writer.join(timeout=5)
            self._writer = None
        with self._lock:
            self._commit_pending()
            self._wdb.close()
