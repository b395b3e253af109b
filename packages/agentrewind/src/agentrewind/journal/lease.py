"""The thread that keeps a run's lease alive while the run is open, and what losing it raises."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal

from ..errors import (
    DataLostError,
    LeaseLostError,
    RunCancelledError,
    RunInterruptedError,
    RunLockedError,
)
from ..stores import Store
from ..stores.leases import fence_error, is_cancel_mark

__all__ = [
    "Ending",
    "LeaseKeeper",
    "check_draining",
    "final_write",
    "lost_error",
    "refused_error",
]

Ending = Literal["normal", "interrupted", "unreachable"]
"""How a run ends: normally, a draining worker stopped it, or its store did not answer."""


@contextlib.contextmanager
def final_write(failed: bool) -> Iterator[None]:
    """Around a run's last write (its status): a fencing error is dropped if the run failed.

    The run's own error (often that same `LeaseLostError`) is then already on its way out.
    """
    try:
        yield
    except (LeaseLostError, DataLostError):
        if not failed:
            raise


def refused_error(run_id: str, result: tuple[bool, str, float]) -> RunLockedError:
    """The error for a refused lease: the run is cancelled, or another process drives it."""
    if is_cancel_mark(result[1]):
        return RunCancelledError(run_id, result[1])
    return RunLockedError(run_id, result[1], result[2])


def check_draining(middleware: Any, run_id: str) -> None:
    """Raise `RunInterruptedError` when the run's middleware drains (a worker stopping)."""
    draining = getattr(middleware, "draining", None)
    if draining is not None and draining.is_set():
        raise RunInterruptedError(run_id)


def lost_error(store: Store, run_id: str, owner: str, lost_to: str) -> Exception:
    """The error for a write after the keeper saw the lease lapse (no write is attempted).

    Args:
        store: The run's store (asked whether the run still exists).
        run_id: The run.
        owner: This execution's lease owner token.
        lost_to: Who held the lease when a renewal failed ('' for nobody).
    """
    if lost_to and lost_to != owner:
        return fence_error(run_id, owner, lost_to, 0.0, True)
    try:
        exists = store.get_run(run_id) is not None
    except Exception:
        exists = True
    return fence_error(run_id, owner, "", 0.0, exists)


class LeaseKeeper(threading.Thread):
    """Renews a lease every third of its ttl until stopped, or until a renewal fails.

    Args:
        name: The run id, for the thread's name.
        renew: Renews the lease (`Store.renew_lease`); returns `(renewed, holder, expires_in)`,
            with the holder '' when the lease is gone.
        ttl: The lease's time to live in seconds.
        renewed_at: `time.monotonic()` of the last successful acquisition.
    """

    def __init__(
        self,
        name: str,
        renew: Callable[[], tuple[bool, str, float]],
        ttl: float,
        renewed_at: float,
    ) -> None:
        super().__init__(name=f"agentrewind-lease-{name}", daemon=True)
        self.renew = renew
        self.ttl = ttl
        self.stop = threading.Event()
        self.lost = False
        self.lost_to = ""
        """Who held the lease when a renewal failed ('' for nobody: it expired or vanished)."""
        self.renewed_at = renewed_at

    @property
    def expired(self) -> bool:
        # Not renewed within its ttl (process stopped, store down): another process may have
        # taken the run over, and even finished it and freed the lease, so never re-take it.
        return self.lost or time.monotonic() - self.renewed_at >= self.ttl

    def run(self) -> None:
        while not self.stop.wait(self.ttl / 3):
            if self.expired:
                self.lost = True
                return
            sent = time.monotonic()
            try:
                # Renew, never re-acquire: a lease that vanished (expired, deleted, lost with
                # the store's data) must stop this owner, not be quietly taken again.
                acquired, holder, _ = self.renew()
            except Exception:
                continue
            if not acquired:
                self.lost_to = holder
                self.lost = True
                return
            self.renewed_at = sent
