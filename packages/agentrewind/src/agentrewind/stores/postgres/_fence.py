"""The lease fence and leases of the PostgreSQL store (mixed into `PostgresStore`).

One fence: `ar_fence_live(ns, run_id, owner, now)` (core migration V2) locks the lease row
until the commit and raises unless `owner` holds an unexpired lease. A store write runs it
as a data-modifying CTE of its own statement (`_fenced`: one statement, one round trip); an
adapter's writes run it as their transaction's first statement (`fenced_in`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from ...errors import StoreBusyError, StoreError
from ..base import LeaseResult
from ..leases import check_fence, lease_owner_is_dead
from . import _sql as Q
from ._db import PostgresDatabase, Statement
from ._flow import NOT_DURABLE, PgFlow, Txn

__all__ = ["PostgresLeases"]

T = TypeVar("T")


class PostgresLeases:
    """Fenced writes and lease rows; expects the store's `db`, `namespace`, `sql`, `drive`."""

    db: PostgresDatabase
    namespace: str
    url: str
    read_only: bool
    _guarded: dict[tuple[str, bool, bool], str]

    def sql(self, name: str) -> Any:  # pragma: no cover - the store's
        raise NotImplementedError

    def render(self, text: Any) -> Any:  # pragma: no cover - the store's
        raise NotImplementedError

    def drive(self, flow: PgFlow[T]) -> T:  # pragma: no cover - the store's
        raise NotImplementedError

    async def adrive(self, flow: PgFlow[T]) -> T:  # pragma: no cover - the store's
        raise NotImplementedError

    def _fenced(
        self,
        run_id: str,
        owner: str | None,
        statement: tuple[str, dict[str, Any]],
        *,
        notify: tuple[str, str] | None = None,
        fetch: int | None = None,
        durable: bool = True,
    ) -> Any:
        """`write([statement])` behind the lease fence of `owner` (None: unfenced)."""
        return self.drive(self._fenced_flow(run_id, owner, statement, notify, fetch, durable))

    def _fenced_flow(
        self,
        run_id: str,
        owner: str | None,
        statement: tuple[str, dict[str, Any]],
        notify: tuple[str, str] | None = None,
        fetch: int | None = None,
        durable: bool = True,
    ) -> PgFlow[Any]:
        """The flow of `_fenced` (driven by `drive`, or `adrive` with no thread).

        With the fence and an optional NOTIFY it is still one statement: one round trip, no
        BEGIN/COMMIT. The fence (`ar_fence_live`, run by a data-modifying CTE, which always
        runs) locks the lease row until the commit, and raises, rolling the statement back,
        unless `owner` holds an unexpired lease; then the lease and run are read to name
        the cause. `durable=False`: `synchronous_commit=off` for this transaction.
        """
        sql, args = statement
        key = (sql, owner is not None, notify is not None)
        text = self._guarded.get(key)
        if text is None:
            ctes = [Q.FENCE_CTE] if owner is not None else []
            ctes += [Q.NOTIFY_CTE] if notify is not None else []
            head = sql.lstrip()
            if ctes and head[:5].upper() == "WITH ":
                text = f"WITH {', '.join(ctes)}, {head[5:]}"
            else:
                text = f"WITH {', '.join(ctes)} {head}" if ctes else sql
            text = self._guarded[key] = self.render(text)
        args = dict(args)
        if notify is not None:
            args |= {"ar_channel": notify[0], "ar_payload": notify[1]}
        settings = None if durable else NOT_DURABLE
        if owner is None:
            return (yield Txn([(text, args)], fetch, settings=settings))
        args |= {"ar_ns": self.namespace, "ar_run": run_id, "ar_owner": owner}
        try:  # guarded: the fence waits on the lease row, which a taker mid-write holds
            return (yield Txn([(text, args)], fetch, guard=True, settings=settings))
        except StoreBusyError as exc:
            raise StoreBusyError(f"run {run_id!r}: {exc}") from exc
        except StoreError as exc:
            if "agentrewind: lease of run" not in str(exc):
                raise
            yield from self._refused_flow(run_id, owner)
            raise

    def fenced_in(self, conn: Any, run_id: str, owner: str, fn: Callable[[Any], T]) -> T:
        """`fn(conn)`, the caller's own writes, in one transaction behind the lease fence.

        For adapters whose tables live in this database (the LangGraph saver): the fence
        locks the lease row first, so the writes commit only while `owner` holds the lease.

        Raises:
            LeaseLostError: Another owner holds the lease, or it expired or was deleted.
        """
        if self.read_only:
            raise StoreError(f"PostgreSQL store {self.url} was opened read-only")
        try:  # settings (lock_timeout, durability, namespace) first, then the fence
            with self.db.transaction(conn):
                conn.execute(*self.fence_statement(run_id, owner))
                return fn(conn)
        except Exception as exc:
            if "agentrewind: lease of run" not in str(exc):
                raise
            self._refused(run_id, owner)
            raise

    def fenced_flow(self, run_id: str, owner: str, flow: PgFlow[T]) -> PgFlow[T]:
        """`flow` with each of its write transactions behind the lease fence.

        The fence statement goes first in the transaction (same pipeline, one round trip):
        it locks the lease row until the commit, so the writes commit only while `owner`
        holds the lease. The flow twin of `fenced_in`, for `drive` and `adrive`.

        Raises:
            LeaseLostError: Another owner holds the lease, or it expired or was deleted.
        """
        reply: Any = None
        while True:
            try:
                item = flow.send(reply)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            if item.write:
                at = None if item.fetch is None else item.fetch + 1
                fence = self.fence_statement(run_id, owner)
                item = Txn([fence, *item.statements], at, guard=True)
            try:
                reply = yield item
            except Exception as exc:
                if "agentrewind: lease of run" not in str(exc):
                    raise
                yield from self._refused_flow(run_id, owner)
                raise

    def _refused(self, run_id: str, owner: str) -> None:
        """Raise the error naming why the fence refused `owner` (the lease and run, read)."""
        self.drive(self._refused_flow(run_id, owner))

    def _refused_flow(self, run_id: str, owner: str) -> PgFlow[None]:
        """The flow of `_refused`: two reads, then the error (`check_fence`)."""
        rows = yield self._lease_row(run_id)
        lease = (rows[0][0], float(rows[0][1])) if rows else None
        args = (self.namespace, run_id, time.time())  # a run's TTL runs by its writers' clocks
        exists = bool((yield self._read("GET_RUN", args)))
        now = float(rows[0][2]) if rows else 0.0  # the lease's by the server's
        check_fence(run_id, owner, lease, now, run_exists=exists, needs_run=False)

    def acquire_lease(self, run_id: str, owner: str, ttl: float) -> LeaseResult:
        return self.drive(self._acquire_lease(run_id, owner, ttl))

    async def aacquire_lease(self, run_id: str, owner: str, ttl: float) -> LeaseResult:
        """Async twin of `acquire_lease` (on the running loop's pool)."""
        return await self.adrive(self._acquire_lease(run_id, owner, ttl))

    def _acquire_lease(self, run_id: str, owner: str, ttl: float) -> PgFlow[LeaseResult]:
        dead = ""
        for _ in range(2):
            args = {"ns": self.namespace, "run": run_id, "owner": owner, "ttl": ttl, "dead": dead}
            try:  # guarded: a stale owner paused inside a write holds the lease row locked
                taken = yield Txn([(self.sql("TAKE_LEASE"), args)], 0, guard=True)
            except StoreBusyError as exc:
                raise StoreBusyError(f"run {run_id!r}: {exc}") from exc
            if taken:
                return LeaseResult((True, owner, ttl))
            rows = yield self._lease_row(run_id)
            if not rows:
                continue  # released meanwhile: try again
            holder, expires, now = rows[0]
            if not lease_owner_is_dead(holder) or dead == holder:
                return LeaseResult((False, holder, max(float(expires) - float(now), 0.0)))
            dead = holder
        rows = yield self._lease_row(run_id)
        if not rows:
            raise StoreError(f"lease of run {run_id!r} could not be taken; try again")
        return _refusal(rows[0])

    def take_lease(self, run_id: str, owner: str, ttl: float, *, holder: str) -> LeaseResult:
        return self.drive(self._take_lease(run_id, owner, ttl, holder))

    async def atake_lease(self, run_id: str, owner: str, ttl: float, *, holder: str) -> LeaseResult:
        """Async twin of `take_lease` (on the running loop's pool)."""
        return await self.adrive(self._take_lease(run_id, owner, ttl, holder))

    def _take_lease(self, run_id: str, owner: str, ttl: float, holder: str) -> PgFlow[LeaseResult]:
        args = {"ns": self.namespace, "run": run_id, "owner": owner, "ttl": ttl}
        args["dead"] = holder or owner
        if (yield Txn([(self.sql("TAKE_LEASE"), args)], 0, guard=True)):
            return LeaseResult((True, owner, ttl))
        rows = yield self._lease_row(run_id)
        return _refusal(rows[0]) if rows else LeaseResult((False, "", 0.0))

    def renew_lease(self, run_id: str, owner: str, ttl: float) -> LeaseResult:
        return self.drive(self._renew_lease(run_id, owner, ttl))

    async def arenew_lease(self, run_id: str, owner: str, ttl: float) -> LeaseResult:
        """Async twin of `renew_lease` (on the running loop's pool)."""
        return await self.adrive(self._renew_lease(run_id, owner, ttl))

    def _renew_lease(self, run_id: str, owner: str, ttl: float) -> PgFlow[LeaseResult]:
        args = {"ns": self.namespace, "run": run_id, "owner": owner, "ttl": ttl}
        if (yield Txn([(self.sql("RENEW"), args)], 0)):
            return LeaseResult((True, owner, ttl))
        rows = yield self._lease_row(run_id)
        if not rows or float(rows[0][1]) <= float(rows[0][2]):
            return LeaseResult((False, "", 0.0))
        return _refusal(rows[0])

    def release_lease(self, run_id: str, owner: str) -> None:
        self.drive(self._release_lease(run_id, owner))

    async def arelease_lease(self, run_id: str, owner: str) -> None:
        """Async twin of `release_lease` (on the running loop's pool)."""
        await self.adrive(self._release_lease(run_id, owner))

    def _release_lease(self, run_id: str, owner: str) -> PgFlow[None]:
        yield Txn([(self.sql("RELEASE_LEASE"), (self.namespace, run_id, owner))])

    def _lease_row(self, run_id: str) -> Txn:
        """The read of `run_id`'s lease row: `(owner, expires_at, the server's now)`, if any."""
        return self._read("GET_LEASE", (self.namespace, run_id))

    def _read(self, name: str, params: Any) -> Txn:
        """A read of one statement of `_sql`, its rows the reply."""
        return Txn([(self.sql(name), params)], 0, write=False)

    def fence_statement(self, run_id: str, owner: str) -> Statement:
        """The statement that makes a write transaction fail unless `owner` holds the lease.

        Put it first in a `write(...)`: the lease row is locked until the commit, and a lost
        or expired lease raises `StoreError` with nothing written (`ar_fence_live`, the
        same fence `_fenced` runs as a CTE and `fenced_in` as the transaction's start).
        """
        args = {"ar_ns": self.namespace, "ar_run": run_id, "ar_owner": owner}
        return self.sql("FENCE_LIVE"), args


def _refusal(row: Any) -> LeaseResult:
    """A refused lease from its row `(holder, expires_at, the server's now)`."""
    return LeaseResult((False, row[0], max(float(row[1]) - float(row[2]), 0.0)))
