"""PostgreSQL connection handling shared by the store and the LangGraph saver.

A `psycopg_pool.ConnectionPool` (or the caller's own pool or connection), autocommit
connections and no session state: every table name is schema-qualified and nothing is `SET`
outside a transaction, so the store works behind PgBouncer in transaction mode (1.21+ keeps
prepared statements there; `prepare_threshold=None` turns them off for older poolers).
A logical write is a list of statements sent in one pipeline as one implicit transaction
(committed by the pipeline's sync; a client-side error before it sends ROLLBACK): one round
trip and one commit. Such a transaction first sets, for itself only (`set_config(..., true)`),
the database's `settings` (row-level security's namespace, reads too), its `write_settings`
(`synchronous_commit`) and a `lock_timeout`: a write
waiting on a row another transaction holds (a writer paused inside its write) fails with
`StoreBusyError` instead of hanging, and an `idle_in_transaction_session_timeout`: the server
ends a transaction of ours its client left idle (paused) that long, so nobody waits on it. A
connection the server dropped (restart, idle timeout) is replaced and the operation tried once
more; psycopg errors come out as agentrewind errors.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from ...errors import StoreError, StoreUnavailableError
from ._deadline import Deadlines
from ._errors import GONE, dropped, translate
from ._listen import listen
from ._quiet import Outages
from ._send import send  # (and registers the typed array parameters' dumpers)
from ._starve import StarvedPools
from ._url import quote_schema, redact, split_url, tcp_settings

try:
    import psycopg
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as exc:  # pragma: no cover - exercised in a session without psycopg
    raise ImportError(
        'the PostgreSQL store needs psycopg 3: pip install "agentrewind[postgres]"'
    ) from exc

__all__ = ["PostgresDatabase", "Statement", "quote_schema", "redact", "split_url"]

T = TypeVar("T")
log = logging.getLogger("agentrewind.stores.postgres")
Statement = tuple[str, Sequence[Any] | dict[str, Any] | None]
"""One SQL statement and its parameters."""

_GUARDS = ("lock_timeout", "idle_in_transaction_session_timeout")


class PostgresDatabase:
    """Connections to one PostgreSQL database.

    Args:
        conninfo: A libpq URL or key=value string (ignored when `pool` or `connection` is given).
        pool: A `psycopg_pool.ConnectionPool` of the caller's (left open on `close`).
        connection: A `psycopg.Connection` of the caller's, used under a lock (left open).
        max_size: Most connections of the pool this object opens.
        prepare_threshold: psycopg's `prepare_threshold` for the pool's connections (default
            5: a statement run 5 times on a connection is prepared, so its plan is reused);
            None never prepares, for PgBouncer before 1.21 in transaction mode.
        pipeline: Send a write's statements in one pipeline (one round trip); False sends
            them one by one inside the transaction (for poolers that reject pipelines).
        connect_timeout: Seconds to wait for a connection before `StoreUnavailableError`.
        lock_timeout: Seconds a write transaction waits for a row lock another transaction
            holds before `StoreBusyError` (nothing written); a transaction of ours left idle
            by its client half that long is ended by the server (its locks freed).
        deadline: Seconds one operation may take, enforced by the client (a frozen or cut-off
            server answers nothing and would hang it): past it, `StoreUnavailableError`.
            Default: `lock_timeout` + 20.
    """

    def __init__(
        self,
        conninfo: str | None = None,
        *,
        pool: Any = None,
        connection: Any = None,
        max_size: int = 8,
        prepare_threshold: int | None = 5,
        pipeline: bool = True,
        connect_timeout: float = 5.0,
        lock_timeout: float = 10.0,
        deadline: float | None = None,
    ) -> None:
        if not lock_timeout > 0:
            raise ValueError(
                f"lock_timeout must be a positive number of seconds, not {lock_timeout}"
            )
        self.lock_timeout = lock_timeout
        self._guard_args = (
            f"{round(lock_timeout * 1000)}ms",
            f"{max(round(lock_timeout * 500), 1)}ms",
        )
        self.url = redact(conninfo or "") if conninfo else "postgresql://(caller's connection)"
        self.conninfo = conninfo or getattr(pool, "conninfo", "") or ""
        self.pipeline = pipeline
        self.max_size, self.prepare_threshold = max_size, prepare_threshold
        self.connect_timeout = connect_timeout
        if deadline is not None and not deadline > 0:
            raise ValueError(f"deadline must be a positive number of seconds, not {deadline}")
        # an operation may wait lock_timeout for a lock, and then do its work
        self.deadlines = Deadlines(deadline or lock_timeout + 20.0, self.url)
        self._tcp = tcp_settings(self.conninfo, deadline or lock_timeout + 20.0)
        self._conn: Any = connection
        self._conn_lock = threading.RLock()
        self._owns_pool = pool is None and connection is None
        self.outages = Outages(self.url)
        """Our pools' warnings during an outage, folded into one line (see `_quiet`)."""
        if self._owns_pool:
            if not conninfo:
                raise ValueError("PostgresDatabase needs a conninfo URL, a pool or a connection")
            # One direct connection first: a wrong database, user or password fails at once
            # with the server's message instead of after the pool's retries.
            try:
                psycopg.connect(conninfo, **self.direct_kwargs()).close()
            except psycopg.Error as exc:
                raise StoreUnavailableError(
                    f"cannot connect to PostgreSQL at {self.url} (unreachable, or the server "
                    f"refused: {str(exc).strip()})"
                ) from exc
            pool = ConnectionPool(
                conninfo,
                min_size=1,
                max_size=max_size,
                kwargs=self.connect_kwargs(),
                timeout=connect_timeout,
                open=False,
                name=self.outages.name,
            )
            pool.open(wait=False)
        elif pool is not None:
            self.url = redact(getattr(pool, "conninfo", "") or self.url)
        self.pool: Any = pool
        self.starving = StarvedPools()
        """Our pools that cannot connect (see `_starve`)."""
        self._closed = False
        self.settings: dict[str, str] = {}
        """Settings each transaction starts with (`set_config(name, value, true)`): local to
        the transaction, so nothing outlives it on a pooled or PgBouncer connection."""
        self.write_settings: dict[str, str] = {}
        """More settings for write transactions (such as `synchronous_commit`)."""

    # -- errors ----------------------------------------------------------------------------
    def translate(self, exc: BaseException) -> StoreError:
        """The agentrewind error for a psycopg (or pool) error (see `_errors.translate`)."""
        return translate(exc, self.url, self.lock_timeout, self.connect_timeout)

    # -- connections -------------------------------------------------------------------------
    @contextlib.contextmanager
    def connection(self) -> Iterator[Any]:
        """A connection for one operation (from the pool, or the caller's under a lock)."""
        quiet = self.outages.active() if self._owns_pool else contextlib.nullcontext()
        with quiet, self._connection() as conn:
            yield conn

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Any]:
        if self._closed:
            raise StoreError(f"PostgreSQL store {self.url} is closed")
        start = time.monotonic()
        if self._conn is not None:
            with self._conn_lock, self.watched(self._conn, start) as conn:
                yield conn
            return
        pool, taken = self.pool, False
        if not self.starving.starved(pool):
            try:
                with pool.connection(timeout=self.deadlines.wait(self.connect_timeout)) as conn:
                    taken = True
                    with self.starving.holding(pool), self.watched(conn, start):
                        yield conn
                return
            except PoolTimeout:
                if taken or not self._owns_pool or not self.starving.starve(pool):
                    raise
        with contextlib.suppress(Exception):
            pool.check()  # (see _starve: a pool that gave up reconnecting tries again)
        kwargs = self.direct_kwargs(self.deadlines.left(start))
        with psycopg.connect(self.conninfo, **kwargs) as conn, self.watched(conn, start):
            yield conn

    @contextlib.contextmanager
    def watched(self, conn: Any, start: float) -> Iterator[Any]:
        """`conn` under the operation deadline (see `_deadline`); its error when it fired."""
        armed = self.deadlines.arm(conn, start)
        try:
            yield conn
        except BaseException as exc:
            err = self.deadlines.error(armed, exc)
            if err is exc:
                raise
            raise err from exc
        else:
            self.outages.ok()
        finally:
            self.deadlines.disarm(armed)

    def connect_kwargs(self) -> dict[str, Any]:
        """How our connections are made: the pools' (sync and async), and `direct_kwargs`.

        With TCP keepalives and a TCP user timeout (the deadline) unless the URL sets them:
        a server that froze or vanished mid-transaction is noticed by the kernel too, not
        only by the deadline's watchdog, and a dead idle connection is dropped by the pool.
        And with `connect_timeout`: a pool's background connect to a server that does not
        answer ends, instead of holding its task (and a loop's shutdown) for ever.
        """
        wait = {"connect_timeout": max(2, round(self.connect_timeout))}
        return {"autocommit": True, "prepare_threshold": self.prepare_threshold} | wait | self._tcp

    def direct_kwargs(self, left: float | None = None) -> dict[str, Any]:
        """A connection opened outside a pool (the first check, or beside a starved pool).

        `left`: what is left of the operation's deadline (libpq waits at least 2 s).
        """
        wait = self.connect_timeout if left is None else min(self.connect_timeout, left)
        return self.connect_kwargs() | {"connect_timeout": max(2, round(wait))}

    def call(self, fn: Callable[[Any], T]) -> T:
        """Run `fn(conn)`; a dropped connection is replaced and `fn` run once more.

        Every operation of the stores is idempotent (upserts, deletes, reads), so running
        one again after the server closed the connection (or a deadlock rolled it back) is safe.
        """
        for attempt in (0, 1, 2):
            try:
                with self.connection() as conn:
                    return fn(conn)
            except Exception as exc:
                if self.retry(exc, attempt, own=self._conn is None) == "dropped":
                    # a restart drops every pooled connection: replace the idle ones too
                    with contextlib.suppress(Exception), self.outages.active():
                        self.pool.check()
        raise AssertionError("unreachable")  # pragma: no cover

    def retry(self, exc: Exception, attempt: int, *, own: bool) -> str:
        """Whether a failed operation runs again (sync and async share it), else raise.

        "deadlock": the victim was rolled back whole (up to twice more); "dropped": the server
        closed the connection (once more). Only on our own pooled connections (`own`), never
        on a caller's.
        """
        if isinstance(exc, psycopg.errors.DeadlockDetected) and attempt < 2 and own:
            return "deadlock"
        if isinstance(exc, GONE) and attempt == 0 and own and dropped(exc):
            return "dropped"
        if isinstance(exc, psycopg.Error) or type(exc).__name__ == "PoolTimeout":
            raise self.translate(exc) from exc
        raise exc

    # -- statements --------------------------------------------------------------------------
    def _prefix(self, write: bool, guard: bool, local: dict[str, str] | None) -> Statement | None:
        """The `set_config(name, value, true)` calls a transaction starts with (None: none).

        Every transaction gets `settings` (e.g. the row-level-security namespace); a write
        also `write_settings` and `local`, and, when guarded or carrying settings anyway, the
        `lock_timeout` and `idle_in_transaction_session_timeout` (see the module docstring).
        """
        settings = self.settings | self.write_settings | (local or {}) if write else self.settings
        if write and (guard or settings):
            settings = dict(zip(_GUARDS, self._guard_args, strict=True)) | settings
        if not settings:
            return None
        calls = ", ".join("set_config(%s, %s, true)" for _ in settings)
        return f"SELECT {calls}", [x for kv in settings.items() for x in kv]

    def run(self, statements: Sequence[Statement], *, fetch: int | None = None) -> list[Any]:
        """Run `statements` in one transaction (one pipeline: one round trip, one commit).

        Args:
            statements: The statements, in order.
            fetch: Index of the statement whose rows are returned (None: no rows).

        Returns:
            The rows of statement `fetch`, or [].
        """

        def txn(conn: Any) -> list[Any]:
            return self.run_in(conn, statements, fetch=fetch)

        return self.call(txn)

    def run_in(
        self,
        conn: Any,
        statements: Sequence[Statement],
        *,
        fetch: int | None = None,
        write: bool = True,
        guard: bool = False,
        local: dict[str, str] | None = None,
    ) -> list[Any]:
        """`run` on a connection the caller holds (`write=False`: a read).

        The transaction starts with `set_config(..., true)` of its settings (`_prefix`):
        several statements, `guard` or any setting make a write guarded by `lock_timeout`.
        Inside a transaction the caller opened (`transaction`, `fenced_in`) they join it.
        """
        status = conn.info.transaction_status
        if conn.autocommit and status != psycopg.pq.TransactionStatus.IDLE:
            cur = send(conn, statements, fetch)
            return [] if fetch is None else list(cur.fetchall())
        pooled = conn.autocommit and self._conn is None
        full, at, how = self.plan(statements, fetch, write, guard, local, conn.autocommit, pooled)
        if how == "single":
            cur = conn.execute(*full[0])
            return [] if at is None else list(cur.fetchall())
        if how == "pipeline":
            with conn.pipeline():
                try:
                    cur = send(conn, full, at)
                except BaseException:
                    # A client-side error (a parameter psycopg cannot adapt) before the sync
                    # would otherwise commit the statements already queued.
                    with contextlib.suppress(Exception):
                        conn.execute("ROLLBACK")
                    raise
        else:
            with conn.transaction():
                cur = send(conn, full, at)
        return [] if at is None else list(cur.fetchall())

    def plan(
        self,
        statements: Sequence[Statement],
        fetch: int | None,
        write: bool,
        guard: bool,
        local: dict[str, str] | None,
        autocommit: bool,
        pooled: bool,
    ) -> tuple[list[Statement], int | None, str]:
        """How a transaction runs, for the sync `run_in` and the async driver alike.

        Returns the statements with the settings' prefix (`_prefix`) first, the index of the
        statement whose rows are the reply, and how: `"single"` (one statement on an
        autocommit connection is its own transaction), `"pipeline"` (on a pooled autocommit
        connection, an implicit transaction: the statements up to the pipeline's sync commit
        together or not at all, no BEGIN/COMMIT: 21 us less than BEGIN..COMMIT in one
        pipeline) or `"transaction"`.
        """
        prefix = self._prefix(write, guard or len(statements) > 1, local)
        full: list[Statement] = [*statements] if prefix is None else [prefix, *statements]
        at = None if fetch is None else fetch + len(full) - len(statements)
        if len(full) == 1 and autocommit:
            return full, at, "single"
        if self.pipeline and pooled:
            return full, at, "pipeline"
        return full, at, "transaction"

    @contextlib.contextmanager
    def transaction(self, conn: Any, *, write: bool = True) -> Iterator[Any]:
        """A transaction on `conn` (the caller's) with the settings applied; `run_in` joins it."""
        with conn.transaction():
            prefix = self._prefix(write, True, None)
            if prefix is not None:
                conn.execute(*prefix)
            yield conn

    def fetchall(self, sql: str, params: Sequence[Any] | dict[str, Any] | None = None) -> list[Any]:
        """Rows of one read-only query."""

        def read(conn: Any) -> list[Any]:
            return self.run_in(conn, [(sql, params)], fetch=0, write=False)

        return self.call(read)

    def fetchone(self, sql: str, params: Sequence[Any] | dict[str, Any] | None = None) -> Any:
        """The first row of one read-only query, or None."""
        rows = self.fetchall(sql, params)
        return rows[0] if rows else None

    def version(self, table: str) -> int | None:
        """The version held in `table` (schema-qualified), None when there is no such table."""
        found = self.fetchone("SELECT to_regclass(%s)", (table,))
        if found is None or found[0] is None:
            return None
        row = self.fetchone(f"SELECT max(version) FROM {table}")
        return 0 if row is None or row[0] is None else int(row[0])

    def migrate(
        self,
        table: str,
        migrations: Sequence[Sequence[str]],
        version: int,
        too_new: Callable[[int], Exception],
    ) -> None:
        """Bring a set of tables to `version` in one transaction (serialised by a lock).

        `table` (schema-qualified) holds the version; `migrations[i]` takes the tables from
        version `i` to `i + 1`. A database at a newer version raises `too_new(current)` and
        is left unchanged. Concurrent migrators wait on a transaction-scoped advisory lock.
        """

        def txn(conn: Any) -> None:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (table,))
                if conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0] is None:
                    conn.execute(f"CREATE TABLE IF NOT EXISTS {table} (version INTEGER NOT NULL)")
                row = conn.execute(f"SELECT max(version) FROM {table}").fetchone()
                current = 0 if row is None or row[0] is None else int(row[0])
                if current > version:
                    raise too_new(current)
                if current < version:
                    for statements in migrations[current:version]:
                        for statement in statements:
                            conn.execute(statement)
                    conn.execute(f"DELETE FROM {table}")
                    conn.execute(f"INSERT INTO {table} (version) VALUES (%s)", (version,))

        self.call(txn)

    def row_security(self, schema: str, tables: Sequence[str], *, enable: bool) -> bool:
        """Whether row-level security is on for `tables` of `schema` (see `_rls.row_security`)."""
        from ._rls import row_security

        return row_security(self, schema, tables, enable=enable)

    def listen(self, channel: str, callback: Callable[[str], None]) -> Callable[[], None]:
        """Deliver each `NOTIFY` on `channel` to `callback` (see `_listen.listen`)."""
        return listen(self, channel, callback)

    def close(self) -> None:
        """Close the pool if this object opened it (a caller's pool or connection stays open)."""
        self._closed = True
        if self._owns_pool and self.pool is not None:
            with contextlib.suppress(Exception):
                self.pool.close(timeout=1.0)
