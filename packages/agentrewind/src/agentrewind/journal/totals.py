"""A run's figures written as it goes: what `Run` counts, and what of it the store holds.

An execution counts its replays, failures, reruns, cache hits and attempts in `Run.metrics`
and writes them to the run's totals (`Store.end_run` with status `running`) before the next
call it runs and at its end; `agentrewind.numbers` reads the totals for every surface.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from ..numbers import run_numbers
from ..records import RunMetrics
from .call import JournalSettings
from .lease import final_write

__all__ = ["RunTotals"]

log = logging.getLogger("agentrewind.journal")


class RunTotals:
    """The part of `Run` that writes its totals (needs the attributes declared here)."""

    middleware: JournalSettings
    run_id: str
    owner: str
    metrics: RunMetrics
    status: str
    totals: RunMetrics | None
    _written: RunMetrics
    _lock: threading.Lock
    _observers: tuple[Any, ...]

    def _emit(self, event: str, *args: Any) -> None: ...

    def _write_end(self, failed: bool) -> None:
        """Write the run's status and the totals not written yet (its end)."""
        with final_write(failed):
            delta = self._unwritten()
            self.middleware.store.end_run(self.run_id, self.status, delta, owner=self.owner)
            self._wrote(delta)

    async def _awrite_end(self, failed: bool) -> None:
        """Async twin of `_write_end`."""
        with final_write(failed):
            delta = self._unwritten()
            await self.middleware.store.aend_run(self.run_id, self.status, delta, owner=self.owner)
            self._wrote(delta)

    def _ended(self, wrote: bool) -> None:
        """Tell the observers the run ended, with its totals when they were written."""
        if self._observers:
            self.totals = self._read_totals() if wrote else None
            self._emit("run_ended")

    async def _aended(self, wrote: bool) -> None:
        """Async twin of `_ended` (the totals are read off the event loop)."""
        if self._observers:
            loop = asyncio.get_running_loop()
            self.totals = await loop.run_in_executor(None, self._read_totals) if wrote else None
            self._emit("run_ended")

    def _unwritten(self) -> RunMetrics:
        """What this execution counted that the store does not hold yet."""
        with self._lock:
            return self.metrics.minus(self._written)

    def _take_pending(self) -> RunMetrics | None:
        """The totals to write before a call runs, None when nothing but steps changed.

        Replays, failures, reruns, cache hits and attempts are written before the next call
        that runs, so a process killed in that call leaves them counted; an executed call is
        counted from its own record (`steps`), so the usual path adds no write. The delta
        taken counts as written (a concurrent call does not write it again) until
        `_put_back` says its write failed.
        """
        with self._lock:
            now, then = self.metrics, self._written
            if (
                now.replay_hits == then.replay_hits
                and now.failures == then.failures
                and now.reruns == then.reruns
                and now.cache_hits == then.cache_hits
                and now.attempts == then.attempts
            ):
                return None
            snapshot = now.copy()
            delta = snapshot.minus(then)
            self._written = snapshot
        return delta

    def _wrote(self, delta: RunMetrics) -> None:
        with self._lock:
            self._written.add(delta)

    def _put_back(self, delta: RunMetrics) -> None:
        with self._lock:
            self._written = self._written.minus(delta)

    def write_totals(self) -> None:
        """Write the run's totals counted since they were last written, if any but steps.

        Every call that runs does this first; an adapter that writes records of its own
        (`store.put_steps`) calls it before, so replays it answered are counted even when its
        process dies next. See `_take_pending`.
        """
        delta = self._take_pending()
        if delta is not None:
            try:
                self.middleware.store.end_run(self.run_id, "running", delta, owner=self.owner)
            except BaseException:
                self._put_back(delta)
                raise

    async def awrite_totals(self) -> None:
        """Async twin of `write_totals`."""
        delta = self._take_pending()
        if delta is not None:
            try:
                await self.middleware.store.aend_run(
                    self.run_id, "running", delta, owner=self.owner
                )
            except BaseException:
                self._put_back(delta)
                raise

    def _read_totals(self) -> RunMetrics | None:
        try:
            return run_numbers(self.middleware.store, self.run_id)
        except Exception:  # an observer's figures must never fail the run
            log.warning("run %r: its totals could not be read for telemetry", self.run_id)
            return None

    def numbers(self) -> RunMetrics:
        """The run's totals over all its executions, as `agentrewind metrics RUN` shows them.

        Reads the store (the steps are counted from the records), and adds what this execution
        counted that is not written yet.
        """
        totals = run_numbers(self.middleware.store, self.run_id)
        pending = self._unwritten()
        pending.steps = 0
        totals.add(pending)
        return totals
