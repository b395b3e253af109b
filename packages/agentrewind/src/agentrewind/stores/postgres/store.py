"""PostgreSQL store: psycopg 3 with a connection pool; one round trip per logical write."""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ...errors import SchemaVersionError, StoreBusyError, StoreError, StoreUnavailableError
from ...records import StepIndex, StepRecord
from ..base import Store
from ..cache import CacheBackend
from ..leases import lease_is_live, leased_error
from ..queue import QueueBackend
from . import _bulk, _flow, _rls, _steps
from . import _sql as Q
from ._db import PostgresDatabase, Statement, quote_schema, split_url
from ._flow import NOT_DURABLE, PgFlow
from ._runs import PostgresRuns

__all__ = ["PostgresStore"]

T = TypeVar("T")

_OUR_PARAMS = (
    "namespace", "schema", "durability", "pipeline", "max_size", "prepare_threshold",
    "lock_timeout", "rls", "deadline",
)  # fmt: skip


class PostgresStore(PostgresRuns, Store):
    """Runs and steps in PostgreSQL tables (`ar_runs`, `ar_steps`, `ar_heads`, `ar_leases`).

    Every write is one statement (data-modifying CTEs), so one round trip and one
    implicit transaction; a write of several statements is sent as one pipeline. Nothing
    depends on session state, so the store works through PgBouncer in transaction mode
    (with `prepare_threshold=None` before PgBouncer 1.21). Leases are rows; a lease-checked
    write runs the schema's `ar_fence_live(ns, run_id, owner, now)` in the same statement
    (a CTE) or transaction (`fenced_in`); see `_fence`.

    Args:
        url: `postgresql://user:password@host:port/dbname` (libpq parameters such as
            `sslmode` stay in the URL). Not needed when `pool` or `connection` is given.
        namespace: Nothing in one namespace is visible from another.
        schema: Schema holding the tables (created if missing; default `public`).
        pool: Your own `psycopg_pool.ConnectionPool` (autocommit connections); left open.
        connection: Your own `psycopg.Connection`, used under a lock; left open.
        async_pool: Your own `psycopg_pool.AsyncConnectionPool` (autocommit connections)
            for the async API (`adrive`), left open; alone, its `conninfo` also opens the
            store's sync pool. Default: a pool per event loop, opened on first async use.
        async_connection: Your own `psycopg.AsyncConnection` for the async API, used under
            an `asyncio.Lock`, left open (needs `url`, `pool` or `connection` for the rest).
        durability: `"full"` (default: the server's `synchronous_commit`) or `"normal"`
            (`synchronous_commit = off` local to each write transaction: a server crash may
            lose the last few hundred milliseconds of commits, never corrupts).
        rls: Row-level security per namespace: enables it on the tables (needs their
            owner, once) and starts every transaction with `set_config('agentrewind.namespace',
            namespace, true)`, so a role that does not own the tables sees and writes only
            its namespace. A store on tables where it is already enabled does the same. The
            client picks that setting: to bind namespaces to database roles (a tenant's role
            cannot open another namespace whatever it sets), the owner opens with
            `rls="role"` (URL `rls=role`) once and binds each with `bind_tenant`.
        max_size: Most connections in the pool the store opens.
        prepare_threshold: psycopg's (default 5: statements run often are prepared, so
            their plans are reused); None never prepares (PgBouncer before 1.21, transaction
            mode; URL `prepare_threshold=none`).
        pipeline: False sends a write's statements one by one (for poolers without
            pipeline support); the write stays one transaction.
        connect_timeout: Seconds to wait for a connection.
        lock_timeout: Seconds a write waits for a row another transaction holds locked (a
            writer paused inside its write) before `StoreBusyError` naming the run, with
            nothing written (default 10; URL `lock_timeout=`). Our own transactions left idle
            by a paused client half that long are ended by the server, freeing their rows.
        deadline: Seconds one operation may take, enforced by this client: a server that
            stops answering (frozen, cut off) ends it in `StoreUnavailableError` instead of
            hanging the agent (default `lock_timeout` + 20; URL `deadline=`).
        read_only: Open for reading only: nothing is created or migrated (the schema must
            exist), and every write raises `StoreError` (what the CLI's views use).
    """

    scheme = "postgresql"
    notifies_in_write = True
    """`put_steps` and `set_head` take `notify=(channel, payload)`: a NOTIFY in the write's
    own transaction, so listeners hear of a change only when it commits."""

    def __init__(
        self,
        url: str | None = None,
        *,
        namespace: str = "default",
        schema: str = "public",
        pool: Any = None,
        connection: Any = None,
        async_pool: Any = None,
        async_connection: Any = None,
        durability: str = "full",
        max_size: int = 8,
        prepare_threshold: int | None = 5,
        pipeline: bool = True,
        connect_timeout: float = 5.0,
        lock_timeout: float = 10.0,
        deadline: float | None = None,
        read_only: bool = False,
        rls: bool | str = False,
    ) -> None:
        if durability not in ("normal", "full"):
            raise ValueError(f"durability must be 'normal' or 'full', not {durability!r}")
        self.schema = schema
        self._q = quote_schema(schema)
        if url is None and pool is None and connection is None and async_pool is not None:
            url = async_pool.conninfo
        self.db = PostgresDatabase(
            url,
            pool=pool,
            connection=connection,
            max_size=max_size,
            prepare_threshold=prepare_threshold,
            pipeline=pipeline,
            connect_timeout=connect_timeout,
            lock_timeout=lock_timeout,
            deadline=deadline,
        )
        super().__init__(url=self.db.url, namespace=namespace)
        self.durability = durability
        self.read_only = read_only
        if durability == "normal":  # per write transaction (SET LOCAL), never the session
            self.db.write_settings["synchronous_commit"] = "off"
        self._async_args = {"pool": async_pool, "connection": async_connection}
        self._aio: Any = None
        self._sql: dict[str, Any] = {}
        self._guarded: dict[tuple[str, bool, bool], str] = {}
        self._channel_key: bytes | None = None
        self.rls: bool | str = False
        """Row-level security on the tables: False, True (per namespace) or "role"."""
        try:
            self._migrate()
            _rls.apply(self, _rls.parse(rls))
        except BaseException:
            self.db.close()
            raise

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> PostgresStore:
        """Build from a URL whose query may carry our options (`namespace`, `schema`, ...)."""
        clean, options = split_url(url, _OUR_PARAMS)
        return cls(clean, **(options | kwargs))

    def sql(self, name: str) -> Any:
        """The statement (or list) `name` of `_sql`, rendered for this store's schema."""
        text = self._sql.get(name)
        if text is None:
            text = self._sql[name] = self.render(getattr(Q, name))
        return text

    def render(self, text: Any) -> Any:
        """SQL text (or a list of it) with `{s}` replaced by this store's quoted schema."""
        return Q.render(text, self._q)

    def _migrate(self) -> None:
        """Create or upgrade the tables (read-only: check they exist at a version we know)."""

        def too_new(current: int) -> SchemaVersionError:
            return SchemaVersionError(
                f"PostgreSQL at {self.url} (schema {self.schema!r}) has agentrewind schema "
                f"version {current}; this agentrewind knows up to {Q.PG_SCHEMA_VERSION}: upgrade "
                "agentrewind (nothing was changed)"
            )

        table = f"{self._q}.ar_schema_version"
        if self.read_only:
            current = self.db.version(table)
            if current is None:
                raise StoreUnavailableError(
                    f"PostgreSQL at {self.url}: schema {self.schema!r} holds no agentrewind "
                    "store (no ar_schema_version table; nothing was created)"
                )
            if current > Q.PG_SCHEMA_VERSION:
                raise too_new(current)
            self.schema_version = current  # older tables stay as they are: read as they are
            return
        migrations = [Q.render(m, self._q) for m in Q.MIGRATIONS]

        # The version table lives in the schema, which the first migration creates.
        # (Only when missing: a role without CREATE on the database may use existing tables.)
        def schema(conn: Any) -> None:
            if conn.execute("SELECT to_regnamespace(%s)", (self._q,)).fetchone()[0] is None:
                conn.execute(f"CREATE SCHEMA IF NOT EXISTS {self._q}")

        self.db.call(schema)
        self.db.migrate(table, migrations, Q.PG_SCHEMA_VERSION, too_new)
        self.schema_version = Q.PG_SCHEMA_VERSION

    def write(
        self,
        statements: Sequence[Statement],
        *,
        fetch: int | None = None,
        guard: bool = False,
        run: str | None = None,
        durable: bool = True,
    ) -> list[Any]:
        """Run `statements` as one transaction in one round trip (with the durability setting).

        Adapters use it for their own tables, so their writes share the store's settings.
        Several statements (or `guard=True`) run under the store's `lock_timeout`; a lock
        held past it raises `StoreBusyError` (naming `run` when given). `durable=False`:
        `synchronous_commit=off` for this transaction (see `Store.put_steps`).
        """
        local = None if durable else NOT_DURABLE
        try:
            return self.db.call(lambda c: self.write_in(c, statements, fetch, guard, local))
        except StoreBusyError as exc:
            if run is None:
                raise
            raise StoreBusyError(f"run {run!r}: {exc}") from exc

    def write_in(
        self,
        conn: Any,
        statements: Sequence[Statement],
        fetch: int | None = None,
        guard: bool = False,
        local: dict[str, str] | None = None,
    ) -> list[Any]:
        """`write` on a connection the caller holds (from `db.call`); `local`: more settings."""
        if self.read_only:
            raise StoreError(f"PostgreSQL store {self.url} was opened read-only")
        return self.db.run_in(conn, statements, fetch=fetch, guard=guard, local=local)

    # -- runs (the rest in `_runs`) -------------------------------------------------------
    def delete_run(self, run_id: str, *, force: bool = False) -> bool:
        if force:
            return bool(self._delete_runs([run_id]))
        for _ in range(3):
            row = self.db.fetchone(self.sql("GET_LEASE"), (self.namespace, run_id))
            now = time.time() if row is None else float(row[2])  # the server's clock
            lease = None if row is None else (str(row[0]), float(row[1]))
            if lease is not None and lease_is_live(lease, now):
                raise leased_error(run_id, lease, now)
            # The check again, in the delete's transaction: the lease row is locked first (a
            # taker mid-write is waited for), then refused if live, unless its owner is the
            # one just seen dead (a dead process cannot renew it).
            dead = lease[0] if lease is not None and lease[1] > now else ""
            check = {"ns": self.namespace, "run": run_id, "now": now, "dead": dead}
            try:
                return bool(self._delete_runs([run_id], check=check))
            except StoreBusyError:
                raise
            except StoreError as exc:
                if "agentrewind: lease of run" not in str(exc):
                    raise
        raise StoreBusyError(f"run {run_id!r}: its lease kept changing; not deleted, try again")

    # The journal's writes as flows (sync and async alike), kept in `_steps`.
    _put_steps = _steps.put_steps
    _set_head = _steps.set_head

    # Bulk reads and deletes (`prune`, opening a long run), kept in `_bulk`.
    _delete_runs = _bulk.delete_runs
    _delete_many = _bulk.delete_many

    def _load_index(self, run_id: str) -> StepIndex | list[StepRecord]:
        """The run's journal as `journal.index` reads it (see `_bulk.load_index`)."""
        return self.drive(_bulk.load_index(self, run_id))

    async def _aload_index(self, run_id: str) -> StepIndex | list[StepRecord]:
        """Async twin of `_load_index` (on the running loop's pool)."""
        return await self.adrive(_bulk.load_index(self, run_id))

    _load_step = _bulk.load_step

    def _purge_expired(self) -> int:
        rows = self.db.fetchall(self.sql("EXPIRED_RUNS"), (self.namespace, time.time()))
        return self._delete_runs([r[0] for r in rows]) if rows else 0

    # -- steps ------------------------------------------------------------------------------
    def put_steps(
        self,
        records: list[StepRecord],
        *,
        heads: dict[str, str] | None = None,
        owner: str | None = None,
        notify: tuple[str, str] | None = None,
        durable: bool = True,
    ) -> None:
        self.drive(self._put_steps(records, heads, owner, notify, durable))

    async def aput_steps(
        self,
        records: list[StepRecord],
        *,
        heads: dict[str, str] | None = None,
        owner: str | None = None,
        notify: tuple[str, str] | None = None,
        durable: bool = True,
    ) -> None:
        """Async twin of `put_steps` (on the running loop's async pool: no thread)."""
        await self.adrive(self._put_steps(records, heads, owner, notify, durable))

    # -- heads ------------------------------------------------------------------------------
    def set_head(
        self,
        run_id: str,
        branch: str,
        step_id: str | None,
        *,
        owner: str | None = None,
        notify: tuple[str, str] | None = None,
    ) -> None:
        self.drive(self._set_head(run_id, branch, step_id, owner, notify))

    async def aset_head(
        self,
        run_id: str,
        branch: str,
        step_id: str | None,
        *,
        owner: str | None = None,
        notify: tuple[str, str] | None = None,
    ) -> None:
        """Async twin of `set_head` (no thread)."""
        await self.adrive(self._set_head(run_id, branch, step_id, owner, notify))

    # -- notifications ----------------------------------------------------------------------
    def channel(self, topic: str) -> str:
        """A LISTEN/NOTIFY channel name for `topic` in this schema and namespace (<= 63 bytes).

        Any role may LISTEN on any channel, so the name is keyed with the namespace's secret
        (`ar_channels`, under the namespace's row-level security): a role that cannot read
        the namespace cannot name its channels.
        """
        if self._channel_key is None:
            self._channel_key = _rls.channel_secret(self).encode()
        name = f"{self.schema}\0{self.namespace}\0{topic}".encode()
        return f"ar_{hmac.new(self._channel_key, name, hashlib.sha256).hexdigest()[:48]}"

    def bind_tenant(self, role: str, namespace: str, *, bound: bool = True) -> None:
        """Let database role `role` open `namespace` under `rls="role"` (`bound=False`: stop).

        Only the tables' owner can; see `_rls` and the multi-tenant how-to.
        """
        _rls.bind_tenant(self, role, namespace, bound=bound)

    def notify(self, channel: str, payload: str) -> None:
        """`pg_notify` (delivered to listeners when the statement commits; <= 8000 bytes)."""
        self.write([("SELECT pg_notify(%s, %s)", (channel, payload))])

    def listen(self, channel: str, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call `callback(payload)` for each notification on `channel`; returns `stop()`."""
        stop: Callable[[], None] = self.db.listen(channel, callback)
        return stop

    # -- I/O written once (see `_flow`) ----------------------------------------------------
    def drive(self, flow: PgFlow[T]) -> T:
        """Run `flow` on the sync pool; returns its result."""
        return _flow.drive(self.db, flow, read_only=self.read_only, url=self.url)

    async def adrive(self, flow: PgFlow[T]) -> T:
        """Run `flow` on the running loop's `AsyncConnectionPool` (no thread).

        A store opened on a caller's sync connection alone (no URL, no async pool or
        connection) has nothing to open an async connection with: its flows run in a thread.
        """
        if not self.aio.native:
            return await self._in_thread(self.drive, flow)
        result: T = await self.aio.adrive(flow, read_only=self.read_only)
        return result

    def drive_in_transaction(self, make: Callable[[], PgFlow[T]]) -> T:
        """Run the flow `make()` as one transaction (maintenance: rows it locks stay locked)."""
        self._writable()
        return self.db.call(lambda conn: _flow.drive_in_transaction(self.db, conn, make()))

    async def adrive_in_transaction(self, make: Callable[[], PgFlow[T]]) -> T:
        """Async twin of `drive_in_transaction` (on the running loop's async pool)."""
        self._writable()
        result: T = await self.aio.adrive_in_transaction(make)
        return result

    def _writable(self) -> None:
        if self.read_only:
            raise StoreError(f"PostgreSQL store {self.url} was opened read-only")

    @property
    def aio(self) -> Any:
        """The async side (`_async.AsyncPostgres`), made on first use."""
        if self._aio is None:
            from ._async import AsyncPostgres

            self._aio = AsyncPostgres(self.db, **self._async_args)
        return self._aio

    async def aclose_async(self) -> None:
        """Close the running loop's async pool (others are closed by `close`)."""
        if self._aio is not None:
            await self._aio.aclose()

    def _open_cache(self) -> CacheBackend:
        from ._cache import PostgresCache

        return PostgresCache(self)

    def _open_queues(self) -> QueueBackend:
        from ._queue import PostgresQueues

        return PostgresQueues(self)

    def close(self) -> None:
        self._flush_cache()
        if self._aio is not None:
            self._aio.close_now()
        self.db.close()
        super().close()
