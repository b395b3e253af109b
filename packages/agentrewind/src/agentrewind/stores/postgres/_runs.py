"""Runs, steps and heads of the PostgreSQL store as flows (mixed into `PostgresStore`).

Each operation is a `PgFlow` written once: the sync method drives it on the sync pool
(`drive`), its async twin on the running loop's `AsyncConnectionPool` (`adrive`, no thread),
with the same statements, settings and lease fence.
"""

from __future__ import annotations

import json
import time

from ...records import RunInfo, RunMetrics, StepRecord
from ..leases import cancel_meta, run_status
from ._fence import PostgresLeases
from ._flow import PgFlow
from ._rows import run_info

UNFINISHED = ("running", "queued")
"""Statuses a lease can change: `running` to crashed or cancelled, `queued` to cancelled."""

__all__ = ["PostgresRuns"]


class PostgresRuns(PostgresLeases):
    """Run rows, step and head reads, on the fence and reads of `PostgresLeases`."""

    # -- runs -------------------------------------------------------------------------------
    def begin_run(
        self, run_id: str, *, ttl: float | None = None, owner: str | None = None
    ) -> RunInfo:
        return self.drive(self._begin_run(run_id, ttl, owner))

    async def abegin_run(
        self, run_id: str, *, ttl: float | None = None, owner: str | None = None
    ) -> RunInfo:
        """Async twin of `begin_run` (on the running loop's pool)."""
        return await self.adrive(self._begin_run(run_id, ttl, owner))

    def _begin_run(self, run_id: str, ttl: float | None, owner: str | None) -> PgFlow[RunInfo]:
        args = {"run": run_id, "now": time.time(), "ttl": ttl, "runs": [run_id]}
        args["count"] = int(owner is not None)  # an execution opening it: metrics.executions
        args |= {"ns": self.namespace, "runs_of": [], "keys": [], "branches": []}
        rows = yield from self._fenced_flow(run_id, owner, (self.sql("UPSERT_RUN"), args), None, 0)
        return run_info(rows[0])

    def end_run(
        self, run_id: str, status: str, metrics: RunMetrics, *, owner: str | None = None
    ) -> None:
        self.drive(self._end_run(run_id, status, metrics, owner))

    async def aend_run(
        self, run_id: str, status: str, metrics: RunMetrics, *, owner: str | None = None
    ) -> None:
        """Async twin of `end_run` (on the running loop's pool)."""
        await self.adrive(self._end_run(run_id, status, metrics, owner))

    def _end_run(
        self, run_id: str, status: str, metrics: RunMetrics, owner: str | None
    ) -> PgFlow[None]:
        args = {
            "ns": self.namespace,
            "run": run_id,
            "status": status,
            "now": time.time(),
            "metrics": json.dumps(metrics.as_dict()),
        }
        yield from self._fenced_flow(run_id, owner, (self.sql("END_RUN"), args))

    def set_ttl(self, run_id: str, ttl: float | None, *, owner: str | None = None) -> None:
        self.drive(self._set_ttl(run_id, ttl, owner))

    async def aset_ttl(self, run_id: str, ttl: float | None, *, owner: str | None = None) -> None:
        """Async twin of `set_ttl` (on the running loop's pool)."""
        await self.adrive(self._set_ttl(run_id, ttl, owner))

    def _set_ttl(self, run_id: str, ttl: float | None, owner: str | None) -> PgFlow[None]:
        args = {"ns": self.namespace, "run": run_id, "now": time.time(), "ttl": ttl}
        yield from self._fenced_flow(run_id, owner, (self.sql("SET_TTL"), args))

    def get_run(self, run_id: str) -> RunInfo | None:
        return self.drive(self._get_run(run_id))

    async def aget_run(self, run_id: str) -> RunInfo | None:
        """Async twin of `get_run` (on the running loop's pool)."""
        return await self.adrive(self._get_run(run_id))

    def _get_run(self, run_id: str) -> PgFlow[RunInfo | None]:
        rows = yield self._read("GET_RUN", (self.namespace, run_id, time.time()))
        if not rows:
            return None
        return (yield from self._crashed([run_info(rows[0])]))[0]

    def list_runs(self, *, limit: int = 100) -> list[RunInfo]:
        return self.drive(self._list_runs(limit))

    async def alist_runs(self, *, limit: int = 100) -> list[RunInfo]:
        """Async twin of `list_runs` (on the running loop's pool)."""
        return await self.adrive(self._list_runs(limit))

    def _list_runs(self, limit: int) -> PgFlow[list[RunInfo]]:
        rows = yield self._read("LIST_RUNS", (self.namespace, time.time(), limit))
        return (yield from self._crashed([run_info(r) for r in rows]))

    def _crashed(self, runs: list[RunInfo]) -> PgFlow[list[RunInfo]]:
        """Show dead owners' `running` runs as `crashed`, cancel-marked ones as `cancelled`.

        One lease query, if any run could be either.
        """
        running = [r.run_id for r in runs if r.status in UNFINISHED]
        if running:
            rows = yield self._read("LEASES", (self.namespace, running))
            leases = {run: (owner, float(until)) for run, owner, until, _ in rows}
            now = float(rows[0][3]) if rows else 0.0  # lease times are the server's
            for r in runs:
                if r.status in UNFINISHED:
                    r.status = run_status(r.status, leases.get(r.run_id), now)
                    if r.status == "cancelled":
                        r.meta.update(cancel_meta(leases.get(r.run_id)))
        return runs

    # -- steps and heads --------------------------------------------------------------------
    def load_steps(self, run_id: str) -> list[StepRecord]:
        return self.drive(self._load_steps(run_id))

    async def aload_steps(self, run_id: str) -> list[StepRecord]:
        """Async twin of `load_steps` (on the running loop's pool)."""
        return await self.adrive(self._load_steps(run_id))

    def _load_steps(self, run_id: str) -> PgFlow[list[StepRecord]]:
        if (yield from self._get_run(run_id)) is None:
            return []
        rows = yield self._read("LOAD_STEPS", (self.namespace, run_id))
        return [StepRecord.decode(data, where=f"run {run_id!r} key {key!r}") for key, data in rows]

    def get_step(self, run_id: str, step_id: str) -> StepRecord | None:
        return self.drive(self._get_step(run_id, step_id))

    async def aget_step(self, run_id: str, step_id: str) -> StepRecord | None:
        """Async twin of `get_step` (on the running loop's pool)."""
        return await self.adrive(self._get_step(run_id, step_id))

    def _get_step(self, run_id: str, step_id: str) -> PgFlow[StepRecord | None]:
        rows = yield self._read("GET_STEP", (self.namespace, run_id, step_id))
        return StepRecord.decode(rows[0][1], where=f"run {run_id!r}") if rows else None

    def get_heads(self, run_id: str) -> dict[str, str]:
        return self.drive(self._get_heads(run_id))

    async def aget_heads(self, run_id: str) -> dict[str, str]:
        """Async twin of `get_heads` (on the running loop's pool)."""
        return await self.adrive(self._get_heads(run_id))

    def _get_heads(self, run_id: str) -> PgFlow[dict[str, str]]:
        return dict((yield self._read("GET_HEADS", (self.namespace, run_id))))
