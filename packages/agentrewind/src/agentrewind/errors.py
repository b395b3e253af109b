"""Every error agentrewind raises. All derive from `AgentRewindError`."""

from __future__ import annotations

__all__ = [
    "AdapterNotFoundError",
    "AgentRewindError",
    "CacheConfigError",
    "CheckpointCycleError",
    "CorruptRecordError",
    "DataLostError",
    "DecryptionError",
    "DivergenceError",
    "DivergenceWarning",
    "IncompleteStepError",
    "LeaseLostError",
    "QueueDeduplicatedError",
    "QueueError",
    "RecordedStepError",
    "RedisPersistenceWarning",
    "RerunWarning",
    "RunCancelledError",
    "RunFinishedError",
    "RunInterruptedError",
    "RunLockedError",
    "RunNotFoundError",
    "SchemaVersionError",
    "SerializationError",
    "StoreBusyError",
    "StoreClosedError",
    "StoreConfigError",
    "StoreError",
    "StoreUnavailableError",
    "WorkflowError",
    "WorkflowNotFoundError",
]


class AgentRewindError(Exception):
    """Base class of every agentrewind error."""


class StoreError(AgentRewindError):
    """A store could not do what was asked."""


class StoreConfigError(StoreError, ValueError):
    """A store was configured wrong: a bad URL option or a reserved schema name.

    Nothing was opened or written.
    """


class StoreUnavailableError(StoreError):
    """The store cannot be reached (Redis down, unreachable host, bad credentials).

    Nothing was written by the operation that raised it: every write is one atomic
    transaction (SQLite) or one atomic script (Redis).
    """


class StoreClosedError(StoreError):
    """The store was closed: `close()` waited for the operations in flight, then refused new ones.

    Nothing was written by the operation that raised it. Open the store again to use it.
    """


class StoreBusyError(StoreError):
    """The store stayed locked by another writer past the wait budget; nothing was written.

    SQLite: the database file stayed locked past `busy_timeout`. PostgreSQL: a row the write
    needs stayed locked by another transaction past `lock_timeout` (for instance a writer
    paused inside its write), or the write deadlocked. Trying again later is safe.
    """


class SchemaVersionError(StoreError):
    """The store was written by a newer agentrewind (schema or record format) than this one."""


class CorruptRecordError(StoreError):
    """A stored record failed its checksum or could not be parsed."""


class CheckpointCycleError(CorruptRecordError):
    """A run's steps name parents that form a cycle (a crafted or damaged store).

    Readers (`Timeline`, `agentrewind branches` and `tree`, the viewer) stop with it rather
    than walk the cycle forever; `import` refuses such a document before writing anything.
    """

    def __init__(self, run_id: str, cycle: list[str]) -> None:
        shown = " -> ".join(cycle[:8]) + (" -> ..." if len(cycle) > 8 else "")
        super().__init__(f"run {run_id!r}: the parents of its checkpoints form a cycle ({shown})")
        self.run_id = run_id
        self.cycle = cycle


class SerializationError(AgentRewindError):
    """A value could not be serialized or deserialized; the message names its path."""

    def __init__(self, message: str, *, path: str = "$") -> None:
        super().__init__(message)
        self.path = path


class DecryptionError(SerializationError):
    """An encrypted stored value cannot be decrypted: a wrong or missing key, or altered bytes."""


class RunLockedError(AgentRewindError):
    """Another live process owns the run's lease."""

    def __init__(self, run_id: str, owner: str, expires_in: float) -> None:
        super().__init__(
            f"run {run_id!r} is being driven by another process ({owner}); "
            f"its lease expires in {max(expires_in, 0.0):.1f}s unless renewed"
        )
        self.run_id = run_id
        self.owner = owner
        self.expires_in = expires_in


class LeaseLostError(RunLockedError):
    """A writer lost the run's lease since it took it; its write was not applied.

    Raised by a fenced store write (every write of a journal run or a timeline carries its
    owner): another process took the run over (`owner` names it), or the lease expired while
    this writer was paused (a GC pause, SIGSTOP, a slow disk) or was deleted (a forced
    delete). The writer must stop: the run's journal belongs to the new owner.
    """

    def __init__(self, run_id: str, owner: str, expires_in: float, *, writer: str = "") -> None:
        AgentRewindError.__init__(
            self,
            f"run {run_id!r}: this process lost its lease"
            + (f" ({writer})" if writer else "")
            + (
                f" to {owner}, which holds it for {max(expires_in, 0.0):.1f}s more"
                if owner
                else "; it expired or was deleted and nobody holds it now"
            )
            + "; the write was not applied and this writer must stop (the run may have been "
            "taken over: resume it again to continue from what its current owner recorded)",
        )
        self.run_id = run_id
        self.owner = owner
        self.expires_in = expires_in
        self.writer = writer


class RunNotFoundError(AgentRewindError, LookupError):
    """The run does not exist in the store (or has expired)."""


class RunCancelledError(LeaseLostError):
    """The run was cancelled (`Middleware.cancel`, `agentrewind cancel`) from any process.

    Its owner learns it at its next journal write or step start, through the fenced write
    path, and stops: nothing after that point is recorded. A cancelled run is never recovered;
    `Middleware.resume(run_id)` clears the mark and runs it again (finished steps replay).
    """

    def __init__(self, run_id: str, mark: str = "", *, writer: str = "") -> None:
        AgentRewindError.__init__(
            self,
            f"run {run_id!r} was cancelled"
            + (f" ({mark})" if mark else "")
            + "; nothing after this point was recorded (resume it with "
            f"Middleware.resume({run_id!r}) or `agentrewind resume {run_id}`)",
        )
        self.run_id = run_id
        self.owner = mark
        self.expires_in = 0.0
        self.writer = writer


class RunFinishedError(AgentRewindError):
    """A run that already completed or failed cannot be cancelled (or resumed as cancelled)."""

    def __init__(self, run_id: str, status: str, action: str) -> None:
        super().__init__(f"cannot {action} run {run_id!r}: it is {status}; nothing was changed")
        self.run_id = run_id
        self.status = status


class RunInterruptedError(AgentRewindError):
    """The run stopped between two steps because its worker is draining (SIGTERM, SIGINT).

    Nothing is marked: the run keeps its status, its lease is released, and it shows as
    `crashed` so another worker (or `recover()`) resumes it, finished steps replayed.
    """

    def __init__(self, run_id: str) -> None:
        super().__init__(
            f"run {run_id!r} stopped between two steps: its worker is draining; it is left "
            "for another worker to resume"
        )
        self.run_id = run_id


class WorkflowError(AgentRewindError):
    """A workflow cannot be registered, run or recovered as asked."""


class QueueError(WorkflowError, ValueError):
    """A queue was misconfigured or misused (a bad limit, an unknown queue, a bad enqueue)."""


class QueueDeduplicatedError(QueueError):
    """An enqueue named a deduplication id that a queued or running run of the queue holds."""

    def __init__(self, queue: str, dedup_id: str, run_id: str) -> None:
        self.queue = queue
        self.dedup_id = dedup_id
        self.run_id = run_id
        super().__init__(
            f"queue {queue!r}: deduplication id {dedup_id!r} is held by run {run_id!r}, "
            "which is queued or running; nothing was enqueued"
        )


class WorkflowNotFoundError(WorkflowError):
    """No workflow of that name is registered in this process, or a run has none recorded."""


class DataLostError(StoreError):
    """A run's record and lease vanished under a live writer; nothing was written.

    The usual causes: a Redis restart without persistence, a `FLUSHDB`/`FLUSHALL`, an
    eviction under `maxmemory`, or a forced delete of the run. The store refuses the write
    rather than start the run again from nothing (which would re-run its finished steps).
    """

    def __init__(self, run_id: str, detail: str) -> None:
        super().__init__(f"run {run_id!r}: {detail}")
        self.run_id = run_id


class RedisPersistenceWarning(UserWarning):
    """The Redis server keeps nothing across a restart (no AOF, no RDB snapshots).

    Issued once per server and process when a store connects. Silence it with
    `connect(url, persistence_warning=False)`, `AGENTREWIND_REDIS_PERSISTENCE_WARNING=0` or a
    warnings filter.
    """


class DivergenceError(AgentRewindError):
    """A resumed run made a call the journal did not expect while recorded calls remain."""


class DivergenceWarning(UserWarning):
    """Warning form of `DivergenceError` (the default when `strict=False`)."""


class RerunWarning(UserWarning):
    """A call that started in an earlier attempt and never completed ran again.

    Its process died in it: whatever it did before dying (a payment, an e-mail) may now be
    done twice.

    Issued under `on_incomplete="rerun"` (the default), at the user's line that made the call.
    Pass `agentrewind.idempotency_key()` downstream to make the second run harmless, or choose
    `on_incomplete="skip"` or `"raise"` for that call.
    """


class IncompleteStepError(AgentRewindError):
    """A step was started but never completed, and its policy is `raise`."""

    def __init__(self, run_id: str, key: str) -> None:
        super().__init__(
            f"step {key!r} of run {run_id!r} started in an earlier attempt but never completed; "
            "it may have had side effects. Policy is 'raise': inspect it, then resume with "
            "on_incomplete='rerun' or 'skip'."
        )
        self.run_id = run_id
        self.key = key


class RecordedStepError(AgentRewindError):
    """A failure journaled with `record_failures=True`, raised again on replay."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(f"{error_type}: {message} (replayed from the journal)")
        self.error_type = error_type
        self.error_message = message


class AdapterNotFoundError(AgentRewindError, TypeError):
    """No installed adapter claims the object passed to `Middleware.wrap`."""


class CacheConfigError(AgentRewindError, ValueError, TypeError):
    """Bad cache arguments to `Middleware.wrap` (`cache_ttl=`, `cache=[...]`).

    A TTL that is not a positive number, a `cache=` pattern that is not a `kind:name` string,
    or one of the two without the other.
    """
