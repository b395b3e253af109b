"""Fenced writes: a write of a run applies only while its writer holds the run's lease.

Every backend checks the lease atomically with the write (under the memory store's lock, in
the SQLite write transaction, inside the Redis script) and turns a failed check into one of
the errors built here, so every store words them the same way.
"""

from __future__ import annotations

from ..errors import AgentRewindError, DataLostError, LeaseLostError, RunLockedError
from ._base import lease_owner_is_dead

__all__ = [
    "LOST_CAUSES",
    "check_fence",
    "fence_error",
    "lease_is_live",
    "leased_error",
    "run_status",
]

LOST_CAUSES = (
    "the store lost its data (a Redis restart without persistence, a FLUSHDB or FLUSHALL, "
    "an eviction under maxmemory) or the run was deleted with force=True"
)


def lease_is_live(lease: tuple[str, float] | None, now: float) -> bool:
    """Whether a lease `(owner, expires_at)` is held: unexpired, by a process not known dead."""
    return lease is not None and lease[1] > now and not lease_owner_is_dead(lease[0])


def run_status(status: str, lease: tuple[str, float] | None, now: float) -> str:
    """The status to show: `crashed` for a `running` run nobody holds a live lease on."""
    if status == "running" and not lease_is_live(lease, now):
        return "crashed"
    return status


def fence_error(
    run_id: str, writer: str, holder: str, expires_in: float, run_exists: bool
) -> AgentRewindError:
    """The error for a writer that does not hold the lease.

    Args:
        run_id: The run.
        writer: The owner token the write carried.
        holder: Who holds the lease now ('' when nobody does).
        expires_in: Seconds the holder's lease has left.
        run_exists: Whether the run's record is still in the store.
    """
    if holder and holder != writer:
        return LeaseLostError(run_id, holder, expires_in, writer=writer)
    if not run_exists:
        return DataLostError(
            run_id,
            f"its run record and lease vanished while {writer} was driving it: {LOST_CAUSES}; "
            "nothing was written, and the writer stopped rather than start the run again "
            "from nothing (which would re-run its finished steps)",
        )
    return LeaseLostError(run_id, "", 0.0, writer=writer)


def check_fence(
    run_id: str,
    writer: str,
    lease: tuple[str, float] | None,
    now: float,
    *,
    run_exists: bool,
    needs_run: bool = True,
) -> None:
    """Raise unless `writer` holds the unexpired lease `(owner, expires_at)`.

    Args:
        run_id: The run.
        writer: The owner token the write carried.
        lease: The run's lease `(owner, expires_at)`, None when there is none.
        now: The time of the write.
        run_exists: Whether the run's record is in the store (unexpired).
        needs_run: The write updates an existing run (every write but `begin_run`): a run
            record that vanished under a live lease (its TTL ran out, an eviction) is
            reported instead of silently starting the run again.

    Raises:
        LeaseLostError: Another owner holds the lease, or it expired or was deleted.
        DataLostError: The run's record and lease are both gone.
    """
    if lease is not None and lease[0] == writer and lease[1] > now:
        if needs_run and not run_exists:
            raise DataLostError(
                run_id,
                f"its run record vanished while {writer} held its lease: its ttl ran out "
                f"between two writes, or {LOST_CAUSES}; nothing was written",
            )
        return
    holder = lease[0] if lease is not None and lease[1] > now else ""
    raise fence_error(run_id, writer, holder, (lease[1] - now) if lease else 0.0, run_exists)


def leased_error(run_id: str, lease: tuple[str, float], now: float) -> RunLockedError:
    """The error for a delete of a run another process is driving (without `force`)."""
    err = RunLockedError(run_id, lease[0], lease[1] - now)
    err.args = (f"{err.args[0]}; not deleted (pass force=True to delete it anyway)",)
    return err
