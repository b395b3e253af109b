"""SQLite store: the embedded default."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from ...errors import SchemaVersionError, StoreError, StoreUnavailableError
from ...records import RunInfo, RunMetrics, StepIndex, StepRecord, open_journal
from ..base import SCHEMA_VERSION, LeaseResult, Store
from ..cache import CacheBackend
from ..leases import (
    cancel_meta,
    check_fence,
    lease_is_live,
    lease_owner_is_dead,
    leased_error,
    run_status,
)
from ..queue import QueueBackend
from . import _sql
from .db import SQLiteDatabase, apply_migrations

__all__ = ["SQLiteStore"]

_TOUCH_EVERY = 0.1
"""Seconds a journal write may leave its run's `updated_at` as it is (1% of the run's TTL if
that is shorter), while the run is the namespace's most recently updated one: `list_runs` order
is exact, and `updated_at` (with the TTL counted from it) lags the last write by less than this.
The touch rewrites the run row and its `updated_at` index entry: as many pages as the step."""


class SQLiteStore(Store):
    """Runs and steps in one SQLite file (WAL).

    Args:
        path: Database file.
        namespace: Nothing in one namespace is visible from another.
        durability: `"normal"` (default) or `"full"` (fsync every commit).
        busy_timeout: Seconds one write attempt waits for the lock; three more attempts follow.
        read_only: Open an existing file for reading only: nothing is created or migrated
            (`StoreUnavailableError` when the file is missing).
    """

    scheme = "sqlite"

    def __init__(
        self,
        path: str | Path,
        *,
        namespace: str = "default",
        durability: str = "normal",
        busy_timeout: float = 10.0,
        read_only: bool = False,
    ) -> None:
        super().__init__(url=f"sqlite:///{path}", namespace=namespace)
        self.db = SQLiteDatabase(
            path, durability=durability, busy_timeout=busy_timeout, read_only=read_only
        )
        if read_only:
            self._check_version()
        else:
            self._migrate()

    def _check_version(self) -> None:
        with self.db.read() as conn:
            try:
                row = conn.execute("SELECT version FROM ar_schema_version").fetchone()
            except sqlite3.OperationalError:
                raise StoreUnavailableError(
                    f"{self.db.path} is not an agentrewind store (no ar_schema_version table)"
                ) from None
        if row is not None and int(row[0]) > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"{self.db.path} has schema version {row[0]}; this agentrewind knows up to "
                f"{SCHEMA_VERSION}: upgrade agentrewind"
            )

    def _migrate(self) -> None:
        def too_new(current: int) -> SchemaVersionError:
            return SchemaVersionError(
                f"{self.db.path} has schema version {current}; this agentrewind knows up to "
                f"{SCHEMA_VERSION}: upgrade agentrewind (nothing was changed)"
            )

        with self.db.write() as conn:
            apply_migrations(conn, "ar_schema_version", _sql.MIGRATIONS, SCHEMA_VERSION, too_new)

    # -- runs -------------------------------------------------------------------------------
    def _fence_txn(
        self,
        conn: sqlite3.Connection,
        run_id: str,
        owner: str | None,
        now: float,
        needs_run: bool = True,
    ) -> None:
        """Check, inside the write transaction, that `owner` holds the run's lease."""
        if owner is None:
            return
        holder, expires, exists = conn.execute(_sql.FENCE, (self.namespace, run_id, now)).fetchone()
        lease = None if holder is None else (holder, expires)
        check_fence(run_id, owner, lease, now, run_exists=bool(exists), needs_run=needs_run)

    def check_lease_in(self, conn: sqlite3.Connection, run_id: str, owner: str) -> None:
        """Fence a write of the caller's own tables, inside its transaction on this database.

        For adapters that keep their tables in the store's file (the LangGraph saver): the
        write commits only if `owner` still holds the lease of `run_id` at that moment.

        Raises:
            LeaseLostError: Another owner holds the lease, or it expired or was deleted.
        """
        self._fence_txn(conn, run_id, owner, time.time(), needs_run=False)

    def begin_run(
        self, run_id: str, *, ttl: float | None = None, owner: str | None = None
    ) -> RunInfo:
        now = time.time()
        with self.db.write() as conn:
            self._fence_txn(conn, run_id, owner, now, needs_run=False)
            self._drop_expired_txn(conn, self.namespace, run_id, now)
            conn.execute(_sql.UPSERT_RUN, (self.namespace, run_id, "running", now, ttl))
            if owner is not None:  # an execution opening the run: metrics.executions
                conn.execute(_sql.COUNT_EXECUTION, (self.namespace, run_id))
            row = conn.execute(_sql.GET_RUN, (self.namespace, run_id, now)).fetchone()
        return _run_info(row, None)

    def end_run(
        self, run_id: str, status: str, metrics: RunMetrics, *, owner: str | None = None
    ) -> None:
        with self.db.write() as conn:
            self._fence_txn(conn, run_id, owner, time.time())
            conn.execute(_sql.TOUCH_RUN, (self.namespace, run_id, time.time()))
            row = conn.execute(_sql.GET_RUN, (self.namespace, run_id, 0)).fetchone()
            total = _metrics(row[5])
            total.add(metrics)
            conn.execute(
                _sql.END_RUN,
                (self.namespace, run_id, status, json.dumps(total.as_dict()), time.time()),
            )

    def get_run(self, run_id: str) -> RunInfo | None:
        with self.db.read() as conn:
            now = time.time()
            row = conn.execute(_sql.GET_RUN, (self.namespace, run_id, now)).fetchone()
        return None if row is None else _run_info(row, now)

    def list_runs(self, *, limit: int = 100) -> list[RunInfo]:
        now = time.time()
        with self.db.read() as conn:
            rows = conn.execute(_sql.LIST_RUNS, (self.namespace, now, limit)).fetchall()
        return [_run_info(r, now) for r in rows]

    def delete_run(self, run_id: str, *, force: bool = False) -> bool:
        with self.db.write() as conn:
            if not force:
                row = conn.execute(_sql.GET_LEASE, (self.namespace, run_id)).fetchone()
                now = time.time()
                if row is not None and lease_is_live(row, now):
                    raise leased_error(run_id, row, now)
            return self._delete_run_txn(conn, self.namespace, run_id)

    def _delete_many(self, run_ids: list[str], *, force: bool) -> tuple[int, list[str]]:
        deleted, skipped = 0, []
        with self.db.write() as conn:  # one transaction: every run goes, or none does
            now = time.time()
            for run_id in run_ids:
                row = None if force else conn.execute(_sql.GET_LEASE, (self.namespace, run_id))
                lease = None if row is None else row.fetchone()
                if lease is not None and lease_is_live(lease, now):
                    skipped.append(run_id)
                else:
                    deleted += self._delete_run_txn(conn, self.namespace, run_id)
        return deleted, skipped

    @staticmethod
    def _delete_run_txn(conn: sqlite3.Connection, ns: str, run_id: str) -> bool:
        deleted = 0
        for statement in _sql.DELETE_RUN:
            deleted = conn.execute(statement, (ns, run_id)).rowcount
        return deleted > 0

    @staticmethod
    def _drop_expired_txn(conn: sqlite3.Connection, ns: str, run_id: str, now: float) -> None:
        # An expired run that `prune` has not purged yet must not come back to life when its
        # id is written again (Redis and memory drop it at expiry): its steps would replay.
        # The lease is kept: the caller may hold it already.
        if conn.execute(_sql.RUN_EXPIRED, (ns, run_id, now)).fetchone() is not None:
            for statement in _sql.DELETE_EXPIRED_RUN:
                conn.execute(statement, (ns, run_id))

    def set_ttl(self, run_id: str, ttl: float | None, *, owner: str | None = None) -> None:
        with self.db.write() as conn:
            self._fence_txn(conn, run_id, owner, time.time())
            conn.execute(_sql.TOUCH_RUN, (self.namespace, run_id, time.time()))
            conn.execute(_sql.SET_TTL, (self.namespace, run_id, ttl))

    def _purge_expired(self) -> int:
        with self.db.write() as conn:
            expired = conn.execute(_sql.EXPIRED_RUNS, (self.namespace, time.time())).fetchall()
            for ns, run_id in expired:
                self._delete_run_txn(conn, ns, run_id)
        return len(expired)

    # -- steps ------------------------------------------------------------------------------
    def put_steps(
        self,
        records: list[StepRecord],
        *,
        heads: dict[str, str] | None = None,
        owner: str | None = None,
        durable: bool = True,
    ) -> None:
        head_run = self._heads_run(records, heads)
        rows = [(self.namespace, r.run_id, r.key, r.step_id, r.seq, r.encode()) for r in records]
        now = time.time()
        run_ids = {r.run_id for r in records}
        with self.db.write(durable=durable) as conn:
            touch = []
            for run_id in run_ids:
                self._fence_txn(conn, run_id, owner, now)
                if self._needs_touch_txn(conn, run_id, now) or len(run_ids) > 1:
                    touch.append(run_id)
            if conn.executemany(_sql.PUT_STEP, rows).rowcount < len(rows):
                conn.executemany(_sql.UPSERT_STEP, rows)  # a key's step id or seq changed
            for run_id in touch:
                conn.execute(_sql.TOUCH_RUN, (self.namespace, run_id, now))
            if head_run is not None and heads:
                conn.executemany(
                    _sql.SET_HEAD,
                    [(self.namespace, head_run, branch, sid) for branch, sid in heads.items()],
                )

    def _needs_touch_txn(self, conn: sqlite3.Connection, run_id: str, now: float) -> bool:
        """Before a journal write: drop the run if it expired; whether its row needs a touch."""
        args = (self.namespace, run_id, now, _TOUCH_EVERY)
        row = conn.execute(_sql.RUN_STATE, args).fetchone()
        if row is None:
            return True  # no run yet: the touch creates it
        if row[0]:  # expired, not purged yet: as in `_drop_expired_txn`
            for statement in _sql.DELETE_EXPIRED_RUN:
                conn.execute(statement, (self.namespace, run_id))
            return True
        return not row[1]

    def load_steps(self, run_id: str) -> list[StepRecord]:
        if self.get_run(run_id) is None:
            return []
        with self.db.read() as conn:
            rows = conn.execute(_sql.LOAD_STEPS, (self.namespace, run_id)).fetchall()
        return [StepRecord.decode(data, where=f"run {run_id!r} key {key!r}") for key, data in rows]

    def _load_index(self, run_id: str) -> StepIndex | list[StepRecord]:
        if self.get_run(run_id) is None:
            return []
        with self.db.read() as conn:
            rows = conn.execute(_sql.LOAD_INDEX, (self.namespace, run_id)).fetchall()

            def last() -> tuple[int, str] | None:
                row = conn.execute(_sql.LAST_STEP, (self.namespace, run_id)).fetchone()
                return None if row is None else (int(row[0]), str(row[1]))

            return open_journal(rows, run_id=run_id, last=last)

    def _load_step(self, run_id: str, key: str) -> StepRecord | None:
        with self.db.read() as conn:
            row = conn.execute(_sql.STEP_BY_KEY, (self.namespace, run_id, key)).fetchone()
        return None if row is None else _decode(run_id, key, row[0])

    def get_step(self, run_id: str, step_id: str) -> StepRecord | None:
        with self.db.read() as conn:
            row = conn.execute(_sql.GET_STEP, (self.namespace, run_id, step_id)).fetchone()
        return None if row is None else StepRecord.decode(row[1], where=f"run {run_id!r}")

    # -- heads ------------------------------------------------------------------------------
    def set_head(
        self, run_id: str, branch: str, step_id: str | None, *, owner: str | None = None
    ) -> None:
        with self.db.write() as conn:
            self._fence_txn(conn, run_id, owner, time.time())
            if step_id is None:
                conn.execute(_sql.DELETE_HEAD, (self.namespace, run_id, branch))
            else:
                conn.execute(_sql.TOUCH_RUN, (self.namespace, run_id, time.time()))
                conn.execute(_sql.SET_HEAD, (self.namespace, run_id, branch, step_id))

    def get_heads(self, run_id: str) -> dict[str, str]:
        with self.db.read() as conn:
            return dict(conn.execute(_sql.GET_HEADS, (self.namespace, run_id)).fetchall())

    # -- leases -----------------------------------------------------------------------------
    def acquire_lease(self, run_id: str, owner: str, ttl: float) -> LeaseResult:
        now = time.time()
        with self.db.write() as conn:
            row = conn.execute(_sql.GET_LEASE, (self.namespace, run_id)).fetchone()
            if row is not None:
                holder, expires = row
                if holder != owner and expires > now and not lease_owner_is_dead(holder):
                    return LeaseResult((False, holder, expires - now))
            conn.execute(_sql.SET_LEASE, (self.namespace, run_id, owner, now + ttl))
        return LeaseResult((True, owner, ttl))

    def renew_lease(self, run_id: str, owner: str, ttl: float) -> LeaseResult:
        now = time.time()
        with self.db.write() as conn:
            args = (self.namespace, run_id, owner, now, now + ttl)
            if conn.execute(_sql.RENEW_LEASE, args).rowcount:
                return LeaseResult((True, owner, ttl))
            row = conn.execute(_sql.GET_LEASE, (self.namespace, run_id)).fetchone()
        if row is None or row[1] <= now:
            return LeaseResult((False, "", 0.0))
        return LeaseResult((False, row[0], row[1] - now))

    def take_lease(self, run_id: str, owner: str, ttl: float, *, holder: str) -> LeaseResult:
        now = time.time()
        with self.db.write() as conn:
            row = conn.execute(_sql.GET_LEASE, (self.namespace, run_id)).fetchone()
            if row is not None and row[1] > now and row[0] not in (owner, holder):
                return LeaseResult((False, row[0], row[1] - now))
            conn.execute(_sql.SET_LEASE, (self.namespace, run_id, owner, now + ttl))
        return LeaseResult((True, owner, ttl))

    def release_lease(self, run_id: str, owner: str) -> None:
        with self.db.write() as conn:
            conn.execute(_sql.RELEASE_LEASE, (self.namespace, run_id, owner))

    def _open_cache(self) -> CacheBackend:
        from ._cache import SQLiteCache

        return SQLiteCache(self)

    def _open_queues(self) -> QueueBackend:
        from ._queue import SQLiteQueues

        return SQLiteQueues(self)

    def close(self) -> None:
        self._flush_cache()
        self.db.close()
        super().close()


def _decode(run_id: str, key: str, data: bytes) -> StepRecord:
    return StepRecord.decode(data, where=f"run {run_id!r} key {key!r}")


def _metrics(text: str) -> RunMetrics:
    try:
        return RunMetrics.from_dict(json.loads(text))
    except (ValueError, TypeError) as exc:
        raise StoreError(f"run metrics are not readable: {exc}") from exc


def _run_info(row: tuple[Any, ...], now: float | None) -> RunInfo:
    """A run row; with `now`, a `running` run whose owner died shows as `crashed`."""
    status, lease = row[1], None if row[6] is None else (row[6], row[7])
    if now is not None:
        status = run_status(status, lease, now)
    meta = cancel_meta(lease) if status == "cancelled" else {}
    return RunInfo(row[0], status, row[2], row[3], row[4], _metrics(row[5]), meta)
