"""The worker loop: take queued runs as their queues' limits allow, resume crashed runs.

`middleware.serve(queues=[...])` and `agentrewind worker MODULE:ATTR --queue NAME` run it.
Each tick it renews the slots of the queued runs it holds (a worker that dies stops
renewing, its slots lapse and its runs are delivered again, resuming elsewhere with replay),
claims crashed runs of its workflows (not those of a queue: their queue delivers them
again), and takes entries of its queues up to its free threads and each queue's
`worker_concurrency`; the store enforces the queue-wide limits in the same atomic step.
On stop it drains: runs in flight stop at their next step, their leases and slots released.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ..errors import (
    QueueError,
    RunLockedError,
)
from ..stores.leases import make_lease_owner
from ..stores.queue import QueueEntry
from .call import log
from .lifecycle import Claim, RecoveryOutcome, candidates, claim
from .queues import Queue
from .workflow import DurableHost, decode_call, input_record

__all__ = ["Worker"]


class Worker:
    """Runs a middleware's queued and crashed workflow runs on a thread pool.

    Args:
        middleware: Whose store, workflows and queues it serves.
        queues: The queues it takes runs from (declared with `middleware.queue`).
        concurrency: Runs at once in this worker, over every queue and recovery.
        poll: Seconds between two looks at the store when idle.
        recover: Whether it also resumes crashed runs of its workflows.
        report: Called with a line per run that ended here (the CLI prints them).
    """

    def __init__(
        self,
        middleware: DurableHost,
        *,
        queues: Sequence[Queue] = (),
        concurrency: int = 8,
        poll: float = 0.5,
        recover: bool = True,
        report: Callable[[str], None] | None = None,
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise QueueError(f"concurrency must be a whole number >= 1, not {concurrency!r}")
        if not isinstance(poll, int | float) or poll <= 0:
            raise QueueError(f"poll must be a positive number of seconds, not {poll!r}")
        self.mw = middleware
        self.queues = list(queues)
        self.concurrency = concurrency
        self.poll = float(poll)
        self.recover = recover
        self.report = report
        self._reporting = threading.Lock()  # runs end on the pool's threads: one line at a time
        self.owner = make_lease_owner()
        self.stop = threading.Event()
        self._wake = threading.Event()  # a run of ours ended, or stop: look again now
        self.in_flight: dict[str, tuple[Queue | None, Future[RecoveryOutcome]]] = {}
        self.pool = ThreadPoolExecutor(concurrency, thread_name_prefix="agentrewind-worker")
        self.done = 0
        self._renewed = time.monotonic()

    # -- one look at the store ------------------------------------------------------------
    def tick(self) -> int:
        """Reap ended runs, renew slots, then start what free threads and limits allow.

        Returns the number of runs started by this tick.
        """
        for run_id in [r for r, (_, f) in self.in_flight.items() if f.done()]:
            del self.in_flight[run_id]
            self.done += 1
        self._renew()
        started = 0
        if self.recover and self._free() > 0:
            started += self._recover()
        for queue in self.queues:
            n = self._free()
            if queue.worker_concurrency is not None:
                mine = sum(1 for q, _ in self.in_flight.values() if q is queue)
                n = min(n, queue.worker_concurrency - mine)
            if n <= 0 or self.stop.is_set():
                continue
            ttl = self.mw.lease_ttl
            for entry in self.mw.store.queues.take(queue.name, queue.limits, self.owner, n, ttl):
                future = self.pool.submit(self._run_entry, queue, entry)
                future.add_done_callback(lambda _: self._wake.set())
                self.in_flight[entry.run_id] = (queue, future)
                started += 1
        return started

    def _free(self) -> int:
        return self.concurrency - len(self.in_flight)

    def _renew(self) -> None:
        if time.monotonic() - self._renewed < self.mw.lease_ttl / 3:
            return
        self._renewed = time.monotonic()
        for queue in self.queues:
            mine = [r for r, (q, f) in self.in_flight.items() if q is queue and not f.done()]
            if mine:
                lost = set(mine) - set(
                    self.mw.store.queues.renew(queue.name, self.owner, mine, self.mw.lease_ttl)
                )
                for run_id in lost:  # its run's lease fences the run itself
                    log.warning("queue %r: slot of run %r lapsed", queue.name, run_id)

    def _recover(self) -> int:
        started = 0
        limit = self._free() + len(self.in_flight)
        for info in candidates(self.mw, include_failed=False, limit=limit):
            if self.stop.is_set() or self._free() <= 0:
                break
            if info.run_id in self.in_flight:
                continue
            try:
                got = claim(self.mw, info, include_failed=False)
            except RunLockedError:
                continue
            if isinstance(got, Claim):
                future = self.pool.submit(self._resume, got)
                future.add_done_callback(lambda _: self._wake.set())
                self.in_flight[info.run_id] = (None, future)
                started += 1
        return started

    # -- running one run ------------------------------------------------------------------
    def _line(self, outcome: RecoveryOutcome, seconds: float, verb: str) -> RecoveryOutcome:
        if self.report is not None:
            how = outcome.outcome + (f": {type(outcome.error).__name__}" if outcome.error else "")
            with self._reporting:
                self.report(
                    f"{verb} {outcome.run_id} ({outcome.workflow}): {how} in {seconds:.2f}s"
                )
        return outcome

    def _resume(self, got: Claim) -> RecoveryOutcome:
        t0 = time.monotonic()
        return self._line(got.resume(), time.monotonic() - t0, "resumed")

    def _run_entry(self, queue: Queue, entry: QueueEntry) -> RecoveryOutcome:
        t0 = time.monotonic()
        outcome = self._outcome(entry)
        if outcome.outcome in ("interrupted", "claimed_elsewhere", "unknown_workflow"):
            # Back in its place for another worker (or this one, next tick).
            self.mw.store.queues.release(queue.name, self.owner, [entry.run_id])
        else:
            self.mw.store.queues.finish(queue.name, entry.run_id)
        verb = "ran" if entry.deliveries <= 1 else "resumed"
        return self._line(outcome, time.monotonic() - t0, verb)

    def _outcome(self, entry: QueueEntry) -> RecoveryOutcome:
        """Open the run (its lease, its journal), read its workflow from it, run it there."""
        run_id, name = entry.run_id, None
        try:
            with self.mw.run(run_id) as run:
                record = input_record(run.records())
                if record is None:
                    run.status = "failed"  # nothing says what to run: it never can
                    return RecoveryOutcome(run_id, None, "not_a_workflow")
                call = decode_call(self.mw, record)
                name = call.workflow
                wf = self.mw.workflows.get(name)
                if wf is None:
                    log.warning("queue %r: workflow %r is not registered here", entry.queue, name)
                    run.status = "queued"  # for a worker that knows it
                    return RecoveryOutcome(run_id, name, "unknown_workflow")
                # A second context on the same run joins this one (no second lease).
                result = wf._run_in(self.mw.run(run_id), call.payload())
        except Exception as exc:
            return RecoveryOutcome.raised(run_id, name, exc)
        return RecoveryOutcome(run_id, name, "completed", result=result)

    # -- the loop -------------------------------------------------------------------------
    def serve(self, *, once: bool = False, drain_timeout: float = 30.0) -> None:
        """Tick until `stop` is set (with `once`: until nothing is left), then drain."""
        try:
            while not self.stop.is_set():
                started = self.tick()
                if once and not started and not self.in_flight:
                    break
                if not started:  # idle, or full: wait for a run of ours to end, or poll
                    self._wake.wait(self.poll)
                    self._wake.clear()
        finally:
            self.drain(drain_timeout)

    def drain(self, timeout: float) -> None:
        """Stop the runs in flight at their next step (leases and slots released)."""
        self.stop.set()
        self._wake.set()
        self.mw.draining.set()
        self.pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + timeout
        for _, future in list(self.in_flight.values()):
            try:
                future.result(timeout=max(deadline - time.monotonic(), 0.0))
            except Exception:
                continue
        self.mw.draining.clear()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.drain(0.0)
