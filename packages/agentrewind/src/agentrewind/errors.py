"""Every error agentrewind raises. All derive from `AgentRewindError`."""

from __future__ import annotations

__all__ = [
    "AdapterNotFoundError",
    "AgentRewindError",
    "CorruptRecordError",
    "DecryptionError",
    "DivergenceError",
    "DivergenceWarning",
    "IncompleteStepError",
    "RecordedStepError",
    "RunLockedError",
    "SchemaVersionError",
    "SerializationError",
    "StoreBusyError",
    "StoreError",
    "StoreUnavailableError",
]


class AgentRewindError(Exception):
    """Base class of every agentrewind error."""


class StoreError(AgentRewindError):
    """A store could not do what was asked."""


class StoreUnavailableError(StoreError):
    """The store cannot be reached (Redis down, unreachable host, bad credentials).

    Nothing was written by the operation that raised it: every write is one atomic
    transaction (SQLite) or one atomic script (Redis).
    """


class StoreBusyError(StoreError):
    """The SQLite database stayed locked by another connection past the retry budget."""


class SchemaVersionError(StoreError):
    """The store was written by a newer agentrewind (schema or record format) than this one."""


class CorruptRecordError(StoreError):
    """A stored record failed its checksum or could not be parsed."""


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


class DivergenceError(AgentRewindError):
    """A resumed run made a call the journal did not expect while recorded calls remain."""


class DivergenceWarning(UserWarning):
    """Warning form of `DivergenceError` (the default when `strict=False`)."""


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
