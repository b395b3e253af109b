"""What a psycopg error means for the PostgreSQL store.

Its agentrewind error (`translate`), and whether the connection is gone (`GONE`, `dropped`:
worth one more try on a fresh one).
"""

from __future__ import annotations

import psycopg

from ...errors import StoreBusyError, StoreError, StoreUnavailableError

__all__ = ["GONE", "dropped", "translate"]

_PREPARED_ERRORS = (
    psycopg.errors.ProtocolViolation,
    psycopg.errors.InvalidSqlStatementName,
    psycopg.errors.DuplicatePreparedStatement,
)
GONE = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
    psycopg.errors.IdleInTransactionSessionTimeout,
)
"""The connection may be gone: the server closed it (a restart, `pg_terminate_backend`, or its
idle-in-transaction timeout ended a transaction of ours whose client was paused)."""

_DROPPED = (
    "server closed the connection", "connection is closed", "the connection is lost",
    "terminating connection", "consuming input failed", "ssl connection has been closed",
    "connection reset", "eof detected", "bad connection",
)  # fmt: skip


def dropped(exc: BaseException) -> bool:
    """True when the error means the connection is gone (worth one retry on a fresh one)."""
    text = str(exc).lower()
    return any(s in text for s in _DROPPED)


def translate(
    exc: BaseException, url: str, lock_timeout: float, connect_timeout: float
) -> StoreError:
    """The agentrewind error for a psycopg (or pool) error of the server at `url`."""
    if isinstance(exc, StoreError):
        return exc
    if isinstance(exc, psycopg.errors.RaiseException) and "agentrewind:" in str(exc):
        return StoreError(str(exc).split("\n", 1)[0])
    if isinstance(exc, psycopg.errors.LockNotAvailable):
        return StoreBusyError(
            f"PostgreSQL at {url}: a row this write needs stayed locked by another "
            f"transaction for {lock_timeout:g}s (lock_timeout; a writer paused inside its "
            "write holds it until it resumes or its connection ends); nothing was written: "
            "try again"
        )
    if isinstance(exc, psycopg.errors.DeadlockDetected):
        return StoreBusyError(
            f"PostgreSQL at {url}: this write deadlocked with another and was rolled back; "
            "nothing was written: try again"
        )
    if "prepared statement" in str(exc) and isinstance(exc, _PREPARED_ERRORS):
        return StoreError(
            f"PostgreSQL at {url}: {str(exc).strip()}: a pooler in transaction mode "
            "(PgBouncer before 1.21) does not keep prepared statements: add "
            "prepare_threshold=none to the store URL"
        )
    if isinstance(exc, GONE):
        return StoreUnavailableError(
            f"PostgreSQL at {url} is unreachable ({type(exc).__name__}: {exc}); "
            "the operation was not applied"
        )
    if type(exc).__name__ == "PoolTimeout":
        return StoreUnavailableError(
            f"no connection to PostgreSQL at {url} within {connect_timeout}s"
        )
    return StoreError(f"PostgreSQL at {url}: {type(exc).__name__}: {exc}")
