"""A run's life after a crash or a cancel: recover, cancel and resume workflow runs.

Everything here coordinates through the store alone (no server of ours): a crashed run is
claimed by taking its lease, the same fenced path every write uses, so two recoverers never
resume one run; a cancel is a mark set as the run's lease (`stores.leases.cancel_mark`), so
its owner learns it at its next write with no extra round trip, and nobody can take the run
until `resume` takes the mark back.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any, Literal

from ..errors import (
    RunCancelledError,
    RunFinishedError,
    RunInterruptedError,
    RunLockedError,
    RunNotFoundError,
    WorkflowNotFoundError,
)
from ..records import RunInfo
from ..stores import Store
from ..stores.leases import CANCEL_TTL, cancel_mark, is_cancel_mark, make_lease_owner
from .workflow import RecordedCall, Workflow, arecorded_call, recorded_call

if TYPE_CHECKING:
    from .opening import RunContext
    from .workflow import Host

__all__ = [
    "Claim",
    "RecoveryOutcome",
    "RecoveryReport",
    "cancel",
    "claim",
    "uncancel",
    "uncancel_mark",
]

Outcome = Literal[
    "completed",
    "failed",
    "cancelled",
    "interrupted",
    "claimed_elsewhere",
    "unknown_workflow",
    "not_a_workflow",
    "queued",
]
FINISHED = ("completed", "failed")


@dataclasses.dataclass(slots=True)
class RecoveryOutcome:
    """What recovery did with one run."""

    run_id: str
    workflow: str | None
    outcome: Outcome
    """`completed` / `failed` / `cancelled` / `interrupted` (a draining worker stopped it
    between steps, left for another): resumed here, and how it ended; the others: left
    alone (`claimed_elsewhere`: another process took it first; `unknown_workflow`: its
    workflow is not registered in this process; `not_a_workflow`: no workflow recorded;
    `queued`: a run of a queue, which its queue's workers deliver again)."""
    result: Any = None
    error: BaseException | None = None

    @classmethod
    def raised(cls, run_id: str, workflow: str | None, exc: Exception) -> RecoveryOutcome:
        """How a run this process ran again ended, from what it raised."""
        outcome: Outcome = "failed"
        if isinstance(exc, RunCancelledError):
            outcome = "cancelled"
        elif isinstance(exc, RunInterruptedError):
            outcome = "interrupted"
        elif isinstance(exc, RunLockedError):
            outcome = "claimed_elsewhere"
        return cls(run_id, workflow, outcome, error=exc)

    @property
    def resumed(self) -> bool:
        """Whether this process ran the run again."""
        return self.outcome in ("completed", "failed", "cancelled", "interrupted")


@dataclasses.dataclass(slots=True)
class RecoveryReport:
    """Every run recovery looked at, in order (see `RecoveryOutcome`)."""

    outcomes: list[RecoveryOutcome] = dataclasses.field(default_factory=list)

    @property
    def resumed(self) -> list[RecoveryOutcome]:
        """The runs this process resumed (whatever their end)."""
        return [o for o in self.outcomes if o.resumed]

    @property
    def unknown(self) -> list[RecoveryOutcome]:
        """Crashed runs left alone: their workflow is not registered here, or they have none."""
        return [o for o in self.outcomes if o.outcome in ("unknown_workflow", "not_a_workflow")]

    def __len__(self) -> int:
        return len(self.outcomes)


@dataclasses.dataclass(slots=True)
class Claim:
    """A crashed run this process holds the lease of, ready to be resumed."""

    info: RunInfo
    workflow: Workflow[Any, Any]
    ctx: RunContext
    payload: dict[str, Any]

    def resume(self) -> RecoveryOutcome:
        """Run the workflow again with its recorded arguments (finished steps replay)."""
        name = self.workflow.name
        try:
            result = self.workflow._run_in(self.ctx, self.payload)
        except Exception as exc:
            return RecoveryOutcome.raised(self.info.run_id, name, exc)
        return RecoveryOutcome(self.info.run_id, name, "completed", result=result)

    async def aresume(self) -> RecoveryOutcome:
        """Async twin of `resume`."""
        name = self.workflow.name
        try:
            result = await self.workflow._arun_in(self.ctx, self.payload)
        except Exception as exc:
            return RecoveryOutcome.raised(self.info.run_id, name, exc)
        return RecoveryOutcome(self.info.run_id, name, "completed", result=result)


def _candidate(
    mw: Host, info: RunInfo, call: RecordedCall | None
) -> tuple[Workflow[Any, Any] | None, RecoveryOutcome | None]:
    if call is None:
        return None, RecoveryOutcome(info.run_id, None, "not_a_workflow")
    if call.queue is not None:  # its queue's workers take it again, within the limits
        return None, RecoveryOutcome(info.run_id, call.workflow, "queued")
    wf = mw.workflows.get(call.workflow)
    if wf is None:
        return None, RecoveryOutcome(info.run_id, call.workflow, "unknown_workflow")
    return wf, None


def claim(mw: Host, info: RunInfo, *, include_failed: bool) -> Claim | RecoveryOutcome:
    """Take the lease of crashed run `info` if its workflow is registered here.

    Returns a `Claim` to resume, or the outcome of leaving the run alone. The status is read
    again under the lease: a run another recoverer finished meanwhile is not run twice.
    """
    call = recorded_call(mw.store, mw, info.run_id)
    wf, left = _candidate(mw, info, call)
    if wf is None or call is None:
        assert left is not None
        return left
    ctx = mw.run(info.run_id)
    if not mw.store.acquire_lease(info.run_id, ctx.run.owner, mw.lease_ttl).acquired:
        return RecoveryOutcome(info.run_id, wf.name, "claimed_elsewhere")
    now = mw.store.get_run(info.run_id)
    wanted = ("running", "crashed", "failed") if include_failed else ("running", "crashed")
    if now is None or now.status not in wanted:
        mw.store.release_lease(info.run_id, ctx.run.owner)
        return RecoveryOutcome(info.run_id, wf.name, "claimed_elsewhere")
    return Claim(info, wf, ctx, call.payload())


async def aclaim(mw: Host, info: RunInfo, *, include_failed: bool) -> Claim | RecoveryOutcome:
    """Async twin of `claim`."""
    call = await arecorded_call(mw.store, mw, info.run_id)
    wf, left = _candidate(mw, info, call)
    if wf is None or call is None:
        assert left is not None
        return left
    ctx = mw.run(info.run_id)
    got = await mw.store.aacquire_lease(info.run_id, ctx.run.owner, mw.lease_ttl)
    if not got.acquired:
        return RecoveryOutcome(info.run_id, wf.name, "claimed_elsewhere")
    now = await mw.store.aget_run(info.run_id)
    wanted = ("running", "crashed", "failed") if include_failed else ("running", "crashed")
    if now is None or now.status not in wanted:
        await mw.store.arelease_lease(info.run_id, ctx.run.owner)
        return RecoveryOutcome(info.run_id, wf.name, "claimed_elsewhere")
    return Claim(info, wf, ctx, call.payload())


def candidates(mw: Host, *, include_failed: bool, limit: int) -> list[RunInfo]:
    """Runs recovery looks at: crashed ones (and failed ones when asked), oldest first."""
    if include_failed:
        runs = [r for r in mw.store.list_runs(limit=1_000_000) if r.status in ("crashed", "failed")]
    else:
        runs = mw.store.crashed_runs(limit=limit)
    return sorted(runs, key=lambda r: r.updated_at)[:limit]


async def acandidates(mw: Host, *, include_failed: bool, limit: int) -> list[RunInfo]:
    """Async twin of `candidates`."""
    if include_failed:
        every = await mw.store.alist_runs(limit=1_000_000)
        runs = [r for r in every if r.status in ("crashed", "failed")]
    else:
        runs = await mw.store.acrashed_runs(limit=limit)
    return sorted(runs, key=lambda r: r.updated_at)[:limit]


def _check_cancellable(mw: Host, run_id: str, info: RunInfo | None) -> None:
    if info is None:
        raise RunNotFoundError(f"no run {run_id!r} in {mw.store.url}; nothing was cancelled")
    if info.status in FINISHED:
        raise RunFinishedError(run_id, info.status, "cancel")


def cancel(mw: Host, run_id: str) -> bool:
    """Mark `run_id` cancelled (see `Middleware.cancel`); False if it already was."""
    _check_cancellable(mw, run_id, mw.store.get_run(run_id))
    mark = cancel_mark()
    holder = ""
    for _ in range(10):  # the holder may change between two attempts (a renewal, a takeover)
        got = mw.store.take_lease(run_id, mark, CANCEL_TTL, holder=holder)
        if got.acquired:
            return True
        if is_cancel_mark(got[1]):
            return False
        holder = got[1]
    raise RunLockedError(run_id, holder, 0.0)


async def acancel(mw: Host, run_id: str) -> bool:
    """Async twin of `cancel`."""
    _check_cancellable(mw, run_id, await mw.store.aget_run(run_id))
    mark = cancel_mark()
    holder = ""
    for _ in range(10):
        got = await mw.store.atake_lease(run_id, mark, CANCEL_TTL, holder=holder)
        if got.acquired:
            return True
        if is_cancel_mark(got[1]):
            return False
        holder = got[1]
    raise RunLockedError(run_id, holder, 0.0)


def _resumable(mw: Host, run_id: str, call: RecordedCall | None) -> Workflow[Any, Any]:
    if call is None:
        raise WorkflowNotFoundError(
            f"run {run_id!r} has no workflow recorded (it was not started by a workflow's "
            "run()); resume it by running its code again with the same run id"
        )
    wf = mw.workflows.get(call.workflow)
    if wf is None:
        raise WorkflowNotFoundError(
            f"run {run_id!r} is a run of workflow {call.workflow!r}, which is not registered "
            f"in this process (registered: {sorted(mw.workflows) or 'none'}); nothing changed"
        )
    return wf


def uncancel(mw: Host, run_id: str) -> tuple[Workflow[Any, Any], RunContext, RecordedCall]:
    """Take a run's lease back from its cancel mark for a new execution of its workflow.

    Raises:
        RunNotFoundError, WorkflowNotFoundError, RunFinishedError, RunLockedError.
    """
    info = mw.store.get_run(run_id)
    if info is None:
        raise RunNotFoundError(f"no run {run_id!r} in {mw.store.url}; nothing was resumed")
    wf = _resumable(mw, run_id, call := recorded_call(mw.store, mw, run_id))
    assert call is not None
    ctx = mw.run(run_id)
    _take_back(mw, run_id, ctx, info, mw.store.acquire_lease(run_id, ctx.run.owner, 0.001))
    return wf, ctx, call


async def auncancel(mw: Host, run_id: str) -> tuple[Workflow[Any, Any], RunContext, RecordedCall]:
    """Async twin of `uncancel`."""
    info = await mw.store.aget_run(run_id)
    if info is None:
        raise RunNotFoundError(f"no run {run_id!r} in {mw.store.url}; nothing was resumed")
    wf = _resumable(mw, run_id, call := await arecorded_call(mw.store, mw, run_id))
    assert call is not None
    ctx = mw.run(run_id)
    got = await mw.store.aacquire_lease(run_id, ctx.run.owner, 0.001)
    if not got.acquired and is_cancel_mark(got[1]):
        got = await mw.store.atake_lease(run_id, ctx.run.owner, mw.lease_ttl, holder=got[1])
    _take_back(mw, run_id, ctx, info, got)
    return wf, ctx, call


def _take_back(
    mw: Host, run_id: str, ctx: RunContext, info: RunInfo, got: tuple[bool, str, float]
) -> None:
    if not got[0] and is_cancel_mark(got[1]):
        got = mw.store.take_lease(run_id, ctx.run.owner, mw.lease_ttl, holder=got[1])
    if not got[0]:
        raise RunLockedError(run_id, got[1], got[2])
    if info.status in ("completed",):
        mw.store.release_lease(run_id, ctx.run.owner)
        raise RunFinishedError(run_id, info.status, "resume")


def uncancel_mark(store: Store, run_id: str) -> None:
    """Clear a run's cancel mark, leaving it `crashed` for a worker or `recover()` to resume.

    Raises:
        RunNotFoundError: No such run.
        RunFinishedError: The run is not cancelled (nothing changes).
    """
    info = store.get_run(run_id)
    if info is None:
        raise RunNotFoundError(f"no run {run_id!r} in {store.url}; nothing was resumed")
    if info.status != "cancelled":
        raise RunFinishedError(run_id, info.status, "clear the cancel mark of")
    owner = make_lease_owner()
    got = store.acquire_lease(run_id, owner, 0.001)
    if not got.acquired and is_cancel_mark(got[1]):
        got = store.take_lease(run_id, owner, 1.0, holder=got[1])
    if not got.acquired:
        raise RunLockedError(run_id, got[1], got[2])
    store.release_lease(run_id, owner)


def wait_for(predicate: Any, timeout: float, poll: float = 0.05) -> bool:
    """Poll `predicate()` until it is true or `timeout` seconds pass (for drains)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)
    return True
