"""SQLite connection handling shared by the store and the LangGraph saver.

One connection per thread (readers never wait on a global lock), WAL, `BEGIN IMMEDIATE`
for writes with a bounded retry so "database is locked" never reaches the user before the
budget is spent, and error mapping to agentrewind errors.
"""

from __future__ import annotations

import contextlib
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from pathlib import Path
from urllib.parse import quote

from ..errors import StoreBusyError, StoreError, StoreUnavailableError

__all__ = ["SQLiteDatabase", "apply_migrations"]


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def apply_migrations(
    conn: sqlite3.Connection,
    table: str,
    migrations: Sequence[Sequence[str]],
    version: int,
    too_new: Callable[[int], Exception],
) -> None:
    """Bring a set of tables to `version` inside the caller's write transaction.

    `table` holds the version; `migrations[i]` takes the tables from version `i` to `i + 1`.
    A database at a newer version raises `too_new(current)` and is left unchanged.
    """
    conn.execute(f"CREATE TABLE IF NOT EXISTS {table} (version INTEGER NOT NULL)")
    row = conn.execute(f"SELECT version FROM {table}").fetchone()
    current = 0 if row is None else int(row[0])
    if current > version:
        raise too_new(current)
    if current < version:
        for statements in migrations[current:version]:
            for statement in statements:
                conn.execute(statement)
        conn.execute(f"DELETE FROM {table}")
        conn.execute(f"INSERT INTO {table} (version) VALUES (?)", (version,))


class SQLiteDatabase:
    """A SQLite file opened for many threads.

    Args:
        path: The database file; parent directories are created.
        durability: `"normal"` (WAL + synchronous=NORMAL: survives process crashes, may lose
            the last commits on power loss) or `"full"` (fsync on every commit).
        busy_timeout: Seconds one attempt waits for another connection's write lock.
        retries: How many more attempts follow a timed-out one before `StoreBusyError`.
        read_only: Open the file read-only; it must exist (nothing is created).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        durability: str = "normal",
        busy_timeout: float = 10.0,
        retries: int = 3,
        read_only: bool = False,
    ) -> None:
        if durability not in ("normal", "full"):
            raise ValueError(f"durability must be 'normal' or 'full', not {durability!r}")
        self.path = str(path)
        self.durability = durability
        self.busy_timeout = busy_timeout
        self.retries = retries
        self.read_only = read_only
        if read_only and not Path(self.path).is_file():
            raise StoreUnavailableError(f"no SQLite store at {self.path} (nothing was created)")
        if self.path != ":memory:" and not read_only:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        self._closed = False
        self._idle = threading.Condition(self._all_lock)  # notified as operations end
        self._in_use: dict[int, int] = {}  # id(connection) -> operations in flight on it

    def connection(self) -> sqlite3.Connection:
        """Return this thread's connection, opening it on first use."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise StoreError(f"SQLite store {self.path} is closed")
            try:
                conn = sqlite3.connect(
                    f"file:{quote(self.path)}?mode=ro" if self.read_only else self.path,
                    isolation_level=None,
                    check_same_thread=False,
                    timeout=self.busy_timeout,
                    uri=self.read_only,
                )
                if not self.read_only:
                    conn.execute("PRAGMA journal_mode=WAL")
                sync = "FULL" if self.durability == "full" else "NORMAL"
                conn.execute(f"PRAGMA synchronous={sync}")
                conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"cannot open SQLite database {self.path}: {exc}") from exc
            self._local.conn = conn
            with self._all_lock:
                self._all.append(conn)
        return conn

    @contextlib.contextmanager
    def write(self, *, durable: bool = True) -> Iterator[sqlite3.Connection]:
        """A `BEGIN IMMEDIATE` transaction: committed on success, rolled back on any error.

        `durable=False` commits without the fsync of `durability="full"` (synchronous=NORMAL
        for this transaction: a power loss may drop it whole; the next full commit syncs the
        WAL, this transaction's pages included).
        """
        conn = self.connection()
        if conn.in_transaction:  # nested: join the outer transaction
            yield conn
            return
        with self._using(conn):
            if durable or self.durability != "full":
                yield from self._write(conn)
                return
            conn.execute("PRAGMA synchronous=NORMAL")
            try:
                yield from self._write(conn)
            finally:
                conn.execute("PRAGMA synchronous=FULL")

    @contextlib.contextmanager
    def _using(self, conn: sqlite3.Connection) -> Iterator[None]:
        """Count an operation in flight on `conn`, so `close` never closes it underneath."""
        with self._all_lock:
            self._in_use[id(conn)] = self._in_use.get(id(conn), 0) + 1
        try:
            yield
        finally:
            with self._all_lock:
                left = self._in_use.pop(id(conn)) - 1
                if left:
                    self._in_use[id(conn)] = left
                self._idle.notify_all()

    def _write(self, conn: sqlite3.Connection) -> Generator[sqlite3.Connection, None, None]:
        self.begin(conn)
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException as exc:
            raise self.aborted(conn, exc)  # noqa: B904 (`aborted` chains `exc`)

    def begin(self, conn: sqlite3.Connection) -> None:
        """`BEGIN IMMEDIATE` on `conn`, retried while another connection holds the write lock.

        With `aborted`, the pieces of `write` for a caller that runs its own transaction
        without a context manager (a hot path).
        """
        for attempt in range(self.retries + 1):
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc):
                    raise StoreError(f"SQLite {self.path}: {exc}") from exc
                if attempt == self.retries:
                    raise StoreBusyError(
                        f"SQLite database {self.path} stayed locked by another connection for "
                        f"{self.busy_timeout * (self.retries + 1):.1f}s; nothing was written"
                    ) from exc
                time.sleep(random.uniform(0.001, 0.05))

    def aborted(self, conn: sqlite3.Connection, exc: BaseException) -> BaseException:
        """Roll back the transaction `exc` ended; returns what to raise (sqlite errors mapped)."""
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        mapped: BaseException = exc
        if isinstance(exc, sqlite3.OperationalError) and _is_busy(exc):
            mapped = StoreBusyError(f"SQLite database {self.path} is locked: {exc}")
        elif isinstance(exc, sqlite3.Error):
            mapped = StoreError(f"SQLite {self.path}: {exc}")
        if mapped is not exc:
            mapped.__cause__ = exc
        return mapped

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection for reads, with sqlite errors mapped to `StoreError`."""
        conn = self.connection()
        try:
            with self._using(conn):
                yield conn
        except sqlite3.OperationalError as exc:
            if _is_busy(exc):
                raise StoreBusyError(f"SQLite database {self.path} is locked: {exc}") from exc
            raise StoreError(f"SQLite {self.path}: {exc}") from exc
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"SQLite {self.path}: {exc}") from exc

    def close(self, wait: float = 5.0) -> None:
        """Close every thread's connection; new operations then raise `StoreError`.

        Operations in flight on other threads finish first (up to `wait` seconds): closing
        a sqlite3 connection while another thread runs a statement on it crashes the
        process. A connection still busy after that is left to its thread, never closed
        under it.
        """
        self._closed = True
        self._local = threading.local()
        with self._all_lock:
            self._idle.wait_for(lambda: not self._in_use, timeout=wait)
            conns, self._all = self._all, []
            busy = [c for c in conns if id(c) in self._in_use]
            conns = [c for c in conns if id(c) not in self._in_use]
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        del busy  # closed by sqlite3 when its thread drops it
