"""Durable queues of workflow runs: enqueue now, run when the queue's limits allow.

`middleware.queue("name", concurrency=..., limiter=...)` declares a queue (every process
that enqueues to it or serves it declares it the same way, as DBOS users do). `enqueue`
records the run as `queued` (its workflow's name and arguments are its first journal entry,
so it lists, cancels, forks and shows like any run) and its queue entry, and returns a
`QueueHandle` at once; workers (`middleware.serve`, `agentrewind worker --queue`) take
entries as the limits allow, across every worker of the store, and run them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from typing import Any

from ..errors import (
    QueueError,
    RecordedStepError,
    RunCancelledError,
    RunNotFoundError,
    WorkflowError,
    WorkflowNotFoundError,
)
from ..ids import new_id
from ..records import StepRecord
from ..serde.encryption import step_place
from ..stores.queue import MAX_PRIORITY, QueueEntry, QueueLimits, QueueStats, check_queue_name
from .workflow import (
    INPUT_KIND,
    RESULT_KIND,
    DurableHost,
    Workflow,
    arecorded_call,
    recorded_call,
)

__all__ = ["Queue", "QueueHandle"]

ENDED = ("completed", "failed", "cancelled")


class Queue:
    """A named queue of workflow runs with flow control (get one from `middleware.queue`).

    Args:
        concurrency: Runs of the queue in flight at once across every worker (per
            partition when `partitioned`); None: no limit.
        worker_concurrency: Runs of the queue one worker runs at once; None: the worker's own.
        limiter: `(n, seconds)`: at most `n` starts in any window of `seconds` (per
            partition when `partitioned`).
        priority: Whether enqueues may pass `priority=` (lower first, FIFO within).
        partitioned: Whether each enqueue names a `partition_key`, the limits then applying
            per key ("one run per user at a time").
    """

    def __init__(
        self,
        middleware: DurableHost,
        name: str,
        *,
        concurrency: int | None = None,
        worker_concurrency: int | None = None,
        limiter: tuple[int, float] | None = None,
        priority: bool = False,
        partitioned: bool = False,
    ) -> None:
        self.middleware = middleware
        self.name = check_queue_name(name)
        self.limits = QueueLimits(concurrency, limiter, bool(partitioned))
        wc = worker_concurrency
        if wc is not None and (isinstance(wc, bool) or not isinstance(wc, int) or wc < 1):
            raise QueueError(f"worker_concurrency must be a whole number >= 1 or None, not {wc!r}")
        self.worker_concurrency = wc
        self.priority = bool(priority)

    def __repr__(self) -> str:
        return f"Queue({self.name!r}, {self.limits}, worker_concurrency={self.worker_concurrency})"

    def _same(self, other: Queue) -> bool:
        return (self.limits, self.worker_concurrency, self.priority) == (
            other.limits,
            other.worker_concurrency,
            other.priority,
        )

    def _entry(
        self,
        run_id: str,
        dedup_id: str | None,
        priority: int,
        partition_key: str | None,
        delay: float | None,
    ) -> QueueEntry:
        """The entry to push, every argument checked (nothing is written before this)."""
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise QueueError(f"priority must be a whole number, not {priority!r}")
        if priority and not self.priority:
            raise QueueError(f"queue {self.name!r} was declared without priority=True")
        if not 0 <= priority <= MAX_PRIORITY:
            raise QueueError(f"priority must be between 0 and {MAX_PRIORITY}, not {priority}")
        if self.limits.partitioned != (partition_key is not None):
            raise QueueError(
                f"queue {self.name!r} is partitioned: pass partition_key="
                if self.limits.partitioned
                else f"queue {self.name!r} is not partitioned: partition_key= is not taken"
            )
        if partition_key is not None and (not isinstance(partition_key, str) or not partition_key):
            raise QueueError(f"partition_key must be a non-empty string, not {partition_key!r}")
        if dedup_id is not None and (not isinstance(dedup_id, str) or not dedup_id):
            raise QueueError(f"dedup_id must be a non-empty string, not {dedup_id!r}")
        not_before = 0.0
        if delay is not None:
            if not isinstance(delay, int | float) or not math.isfinite(delay) or delay < 0:
                raise QueueError(f"delay must be a number of seconds >= 0, not {delay!r}")
            not_before = time.time() + delay
        return QueueEntry(self.name, run_id, priority, partition_key or "", dedup_id, not_before)

    def _workflow(self, workflow: Workflow[Any, Any] | str) -> Workflow[Any, Any]:
        if isinstance(workflow, Workflow):
            return workflow
        wf = self.middleware.workflows.get(workflow) if isinstance(workflow, str) else None
        if wf is None:
            raise WorkflowNotFoundError(
                f"cannot enqueue {workflow!r}: pass a Workflow or the name of one registered "
                f"here (registered: {sorted(self.middleware.workflows) or 'none'})"
            )
        return wf

    def enqueue(
        self,
        workflow: Workflow[Any, Any] | str,
        *args: Any,
        run_id: str | None = None,
        dedup_id: str | None = None,
        priority: int = 0,
        partition_key: str | None = None,
        delay: float | None = None,
        **kwargs: Any,
    ) -> QueueHandle:
        """Record a run of `workflow(*args, **kwargs)` as queued; return at once.

        `run_id` names the run (None: a new id); enqueueing a run id that is already a run of
        the same workflow returns its handle and queues nothing (a retried enqueue is safe).

        Raises:
            QueueError: A bad argument (a priority on a queue without priorities, a missing
                or unexpected partition key, a negative delay...): nothing is queued.
            QueueDeduplicatedError: `dedup_id` is held by a queued or running run.
            SerializationError: The arguments cannot be stored: nothing is queued.
            WorkflowError: `run_id` is a run of another workflow.
        """
        wf, record, entry = self._prepare(workflow, run_id, dedup_id, priority, partition_key,
                                          delay, args, kwargs)  # fmt: skip
        mw = self.middleware
        if run_id is not None and mw.store.get_run(entry.run_id) is not None:
            self._known(recorded_call(mw.store, mw, entry.run_id), entry.run_id, wf)
            return QueueHandle(self, entry.run_id)
        mw.store.queues.enqueue(record, entry)
        return QueueHandle(self, entry.run_id)

    def _prepare(
        self,
        workflow: Workflow[Any, Any] | str,
        run_id: str | None,
        dedup_id: str | None,
        priority: int,
        partition_key: str | None,
        delay: float | None,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> tuple[Workflow[Any, Any], StepRecord, QueueEntry]:
        """Everything an enqueue writes, every argument checked: nothing is written yet.

        A new run id (`run_id` None) names no run, so only a given one is looked up.
        """
        wf = self._workflow(workflow)
        run_id = run_id or new_id()
        entry = self._entry(run_id, dedup_id, priority, partition_key, delay)
        payload = wf._payload(args, kwargs) | {"queue": self.name}
        return wf, _input_record(self.middleware, run_id, wf.name, payload), entry

    async def aenqueue(
        self,
        workflow: Workflow[Any, Any] | str,
        *args: Any,
        run_id: str | None = None,
        dedup_id: str | None = None,
        priority: int = 0,
        partition_key: str | None = None,
        delay: float | None = None,
        **kwargs: Any,
    ) -> QueueHandle:
        """Async twin of `enqueue`."""
        wf, record, entry = self._prepare(workflow, run_id, dedup_id, priority, partition_key,
                                          delay, args, kwargs)  # fmt: skip
        mw = self.middleware
        if run_id is not None and await mw.store.aget_run(entry.run_id) is not None:
            self._known(await arecorded_call(mw.store, mw, entry.run_id), entry.run_id, wf)
            return QueueHandle(self, entry.run_id)
        await mw.store.queues.aenqueue(record, entry)
        return QueueHandle(self, entry.run_id)

    def _known(self, call: Any, run_id: str, wf: Workflow[Any, Any]) -> None:
        """An enqueue of an existing run: the same workflow and queue, or a named error."""
        if call is None or call.workflow != wf.name or call.queue != self.name:
            what = "not a workflow run" if call is None else f"a run of workflow {call.workflow!r}"
            where = f" in queue {call.queue!r}" if call is not None and call.queue else ""
            raise WorkflowError(
                f"run {run_id!r} exists and is {what}{where}; nothing was enqueued to {self.name!r}"
            )

    def handle(self, run_id: str) -> QueueHandle:
        """The handle of a run enqueued earlier (by any process)."""
        return QueueHandle(self, run_id)

    def stats(self) -> QueueStats:
        """Depth, in flight and oldest waiting entry of this queue, now."""
        return self.middleware.store.queues.stats(self.name)[0]


def _input_record(mw: DurableHost, run_id: str, name: str, payload: dict[str, Any]) -> StepRecord:
    """The run's first record (its workflow and arguments) as its execution writes it.

    Built on a run that is never opened (no lease, nothing read), so the execution a worker
    starts later finds it under the same key and replays it.
    """
    call = mw.run(run_id).run.begin(INPUT_KIND, name, payload)
    record: StepRecord = call._completed_record(payload, None)
    return record


@dataclasses.dataclass(frozen=True, slots=True)
class QueueHandle:
    """A queued run, from any process: its status, its result when it ends, its cancel."""

    queue: Queue
    run_id: str

    def status(self) -> str:
        """The run's status: `queued`, `running`, `crashed`, `completed`, `failed`, `cancelled`."""
        info = self.queue.middleware.store.get_run(self.run_id)
        if info is None:
            raise RunNotFoundError(f"no run {self.run_id!r} in {self.queue.middleware.store.url}")
        return info.status

    async def astatus(self) -> str:
        """Async twin of `status`."""
        return await asyncio.to_thread(self.status)

    def result(self, timeout: float | None = None, *, poll: float = 0.05) -> Any:
        """Wait for the run to end (in whatever process runs it) and return its result.

        Raises:
            TimeoutError: It did not end within `timeout` seconds (it goes on).
            RunCancelledError: It was cancelled.
            RecordedStepError: The workflow raised: its recorded type and message.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        wait = poll
        while (status := self.status()) not in ENDED:
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"run {self.run_id!r} of queue {self.queue.name!r} is still {status} "
                    f"after {timeout} s"
                )
            time.sleep(wait if deadline is None else min(wait, max(deadline - time.monotonic(), 0)))
            wait = min(wait * 1.5, 1.0)
        return self._outcome(status, self.queue.middleware.store.load_steps(self.run_id))

    async def aresult(self, timeout: float | None = None, *, poll: float = 0.05) -> Any:
        """Async twin of `result` (polls without blocking the event loop)."""
        store = self.queue.middleware.store
        deadline = None if timeout is None else time.monotonic() + timeout
        wait = poll
        while True:
            info = await store.aget_run(self.run_id)
            if info is None:
                raise RunNotFoundError(f"no run {self.run_id!r} in {store.url}")
            if info.status in ENDED:
                return self._outcome(info.status, await store.aload_steps(self.run_id))
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"run {self.run_id!r} of queue {self.queue.name!r} is still "
                    f"{info.status} after {timeout} s"
                )
            await asyncio.sleep(wait)
            wait = min(wait * 1.5, 1.0)

    def _outcome(self, status: str, records: list[StepRecord]) -> Any:
        if status == "cancelled":
            raise RunCancelledError(self.run_id)
        record = next((r for r in reversed(records) if r.kind == RESULT_KIND), None)
        if record is not None and record.status == "completed":
            mw = self.queue.middleware
            place = step_place(mw.store.namespace, self.run_id, record.key)
            return mw.serializer.open(record.output, place)
        err = {} if record is None else record.meta.get("error", {})
        raise RecordedStepError(
            str(err.get("type", "WorkflowError")),
            str(err.get("message", f"run {self.run_id!r} {status} without a result")),
        )

    def cancel(self) -> bool:
        """Cancel the run (queued: it never starts; running: it stops at its next step).

        Its queue entry goes at once, so its deduplication id is free again. False if it
        was cancelled already.
        """
        changed: bool = self.queue.middleware.cancel(self.run_id)
        self.queue.middleware.store.queues.finish(self.queue.name, self.run_id)
        return changed

    async def acancel(self) -> bool:
        """Async twin of `cancel`."""
        changed: bool = await self.queue.middleware.acancel(self.run_id)
        await self.queue.middleware.store.queues.afinish(self.queue.name, self.run_id)
        return changed
