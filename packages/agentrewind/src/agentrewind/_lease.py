"""The thread that keeps a run's lease alive while the run is open."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .journal import Run


class LeaseKeeper(threading.Thread):
    def __init__(self, run: Run, renewed_at: float) -> None:
        super().__init__(name=f"agentrewind-lease-{run.run_id}", daemon=True)
        self.owner_run = run
        self.stop = threading.Event()
        self.lost = False
        self.renewed_at = renewed_at

    @property
    def expired(self) -> bool:
        # Not renewed within its ttl (process stopped, store down): another process may have
        # taken the run over, and even finished it and freed the lease, so never re-take it.
        return self.lost or time.monotonic() - self.renewed_at >= self.owner_run.lease_ttl

    def run(self) -> None:
        r = self.owner_run
        while not self.stop.wait(r.lease_ttl / 3):
            if self.expired:
                self.lost = True
                return
            sent = time.monotonic()
            try:
                result = r.middleware.store.acquire_lease(r.run_id, r.owner, r.lease_ttl)
            except Exception:
                continue
            if not result.acquired:
                self.lost = True
                return
            self.renewed_at = sent
