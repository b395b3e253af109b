"""Leases: who owns a run (lease owners, dead owners) and fenced writes.

A write of a run applies only while its writer holds the run's lease.

Every backend checks the lease atomically with the write (under the memory store's lock, in
the SQLite write transaction, inside the Redis script) and turns a failed check into one of
the errors built here, so every store words them the same way.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time

from ..errors import (
    AgentRewindError,
    DataLostError,
    LeaseLostError,
    RunCancelledError,
    RunLockedError,
)

__all__ = [
    "CANCEL_TTL",
    "LOST_CAUSES",
    "LeaseResult",
    "cancel_mark",
    "cancel_meta",
    "check_fence",
    "fence_error",
    "is_cancel_mark",
    "lease_is_live",
    "lease_owner_is_dead",
    "lease_owner_is_local",
    "leased_error",
    "make_lease_owner",
    "retire_lease_owner",
    "run_status",
]

_HOST = socket.gethostname()
_LIVE_OWNERS: set[str] = set()  # owners made in this process and not yet retired


def make_lease_owner() -> str:
    """Return a lease owner id `host:pid:token` unique to this process and run."""
    owner = f"{_HOST}:{os.getpid()}:{os.urandom(4).hex()}"
    _LIVE_OWNERS.add(owner)
    return owner


def retire_lease_owner(owner: str) -> None:
    """Mark `owner` finished: a lease it could not release is then free to this process."""
    _LIVE_OWNERS.discard(owner)


def lease_owner_is_local(owner: str) -> bool:
    """True when `owner` (`host:pid:token`) names a process on this host: its pid tells."""
    return owner.partition(":")[0] == _HOST


def lease_owner_is_dead(owner: str) -> bool:
    """True when `owner` names a process on this host that no longer exists.

    A SIGKILLed run then resumes at once instead of waiting for its lease to expire. In this
    process, an owner retired by `retire_lease_owner` (its run ended, perhaps unable to release
    its lease because the store was down) counts as dead too.
    """
    host, _, rest = owner.partition(":")
    pid_s = rest.partition(":")[0]
    if host != _HOST or not pid_s.isdigit():
        return False
    pid = int(pid_s)
    if pid == os.getpid():
        return owner not in _LIVE_OWNERS
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    return False


_CANCEL = "cancelled:"
CANCEL_TTL = 10 * 365 * 86400.0
"""How long a cancel mark holds a run's lease: until `resume` takes it back (ten years)."""


def cancel_mark() -> str:
    """A lease owner that marks a run cancelled: `cancelled:<unix time>:<host>:<pid>:<token>`.

    Set as the run's lease (see `Store.take_lease`), it fences the run's owner off at its
    next write (`RunCancelledError`), refuses every other taker, and shows the run as
    `cancelled`; it names no live process, so it is never judged dead.
    """
    return f"{_CANCEL}{time.time():.3f}:{_HOST}:{os.getpid()}:{os.urandom(3).hex()}"


def is_cancel_mark(owner: str) -> bool:
    """Whether a lease owner is a cancel mark (see `cancel_mark`)."""
    return owner.startswith(_CANCEL)


def cancelled_at(owner: str) -> float | None:
    """When the cancel mark `owner` was set (unix time), None for any other owner."""
    if not is_cancel_mark(owner):
        return None
    try:
        return float(owner[len(_CANCEL) :].split(":", 1)[0])
    except ValueError:
        return None


LOST_CAUSES = (
    "the store lost its data (a Redis restart without persistence, a FLUSHDB or FLUSHALL, "
    "an eviction under maxmemory) or the run was deleted with force=True"
)


def cancel_meta(lease: tuple[str, float] | None) -> dict[str, float]:
    """`{"cancelled_at": unix time}` for a run whose lease holds a cancel mark, else `{}`."""
    at = None if lease is None else cancelled_at(lease[0])
    return {} if at is None else {"cancelled_at": at}


def lease_is_live(lease: tuple[str, float] | None, now: float) -> bool:
    """Whether a lease `(owner, expires_at)` is held: unexpired, by a process not known dead."""
    return lease is not None and lease[1] > now and not lease_owner_is_dead(lease[0])


def run_status(status: str, lease: tuple[str, float] | None, now: float) -> str:
    """The status to show: `crashed` or `cancelled` where the lease says so.

    `crashed`: a `running` run nobody holds a live lease on; `cancelled`: an unfinished run
    whose lease holds a cancel mark.
    """
    if lease is not None and is_cancel_mark(lease[0]) and status not in ("completed", "failed"):
        return "cancelled"
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
    if holder and is_cancel_mark(holder):
        return RunCancelledError(run_id, holder, writer=writer)
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


class LeaseResult(tuple[bool, str, float]):
    """`(acquired, owner, expires_in_seconds)` of a lease attempt."""

    __slots__ = ()

    @property
    def acquired(self) -> bool:
        """Whether the caller now holds the lease."""
        return self[0]
