"""The thread that keeps a run's lease alive while the run is open."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["LeaseKeeper"]


class LeaseKeeper(threading.Thread):
    """Renews a lease every third of its ttl until stopped, or until a renewal fails.

    Args:
        name: The run id, for the thread's name.
        renew: Re-acquires the lease; returns False when another owner holds it.
        ttl: The lease's time to live in seconds.
        renewed_at: `time.monotonic()` of the last successful acquisition.
    """

    def __init__(self, name: str, renew: Callable[[], bool], ttl: float, renewed_at: float) -> None:
        super().__init__(name=f"agentrewind-lease-{name}", daemon=True)
        self.renew = renew
        self.ttl = ttl
        self.stop = threading.Event()
        self.lost = False
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
                acquired = self.renew()
            except Exception:
                continue
            if not acquired:
                self.lost = True
                return
            self.renewed_at = sent
