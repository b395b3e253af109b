"""Durable execution on a `Middleware`: workflows, queues, workers, recovery, cancel, resume.

A mixin of `Middleware`, kept apart so the journal's core reads on its own; the logic
lives in `workflow`, `queues`, `serving` and `lifecycle`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, overload

from ..errors import QueueError, WorkflowError
from ..serde import Serializer
from ..stores import Store
from . import lifecycle
from .call import log
from .lifecycle import RecoveryReport
from .queues import Queue
from .serving import Worker
from .workflow import Workflow, body_of

if TYPE_CHECKING:
    from .opening import RunContext

__all__ = ["Durable"]

P = ParamSpec("P")
R = TypeVar("R")


class Durable:
    """Workflows, queues, workers, recovery, cancel and resume (mixed into `Middleware`)."""

    store: Store
    serializer: Serializer
    lease_ttl: float
    workflows: dict[str, Workflow[Any, Any]]
    queues: dict[str, Queue]
    draining: threading.Event
    recovery: threading.Thread | None
    last_recovery: RecoveryReport | None

    if TYPE_CHECKING:

        def run(self, run_id: str | None = None) -> RunContext: ...

    # -- workflows and a run's life ---------------------------------------------------------
    @overload
    def workflow(self, name: str, /) -> Callable[[Callable[P, R]], Workflow[P, R]]: ...
    @overload
    def workflow(self, name: str, obj: Callable[P, R], /) -> Workflow[P, R]: ...
    @overload
    def workflow(self, name: str, obj: Any, /) -> Workflow[..., Any]: ...
    def workflow(
        self, name: str, obj: Any = None, /
    ) -> Workflow[Any, Any] | Callable[[Callable[P, R]], Workflow[P, R]]:
        """Register a function (sync or async) as a workflow under a stable `name`.

        `@middleware.workflow("charge")` decorates a function; `middleware.workflow("charge",
        obj)` registers one directly, or a framework object: a (wrapped) LangChain runnable or
        agent, a compiled LangGraph graph, a LlamaIndex workflow (see `body_of`). Its runs
        record the name and the arguments, so any process that registers the same name can
        recover or resume them (`recover`, `resume`, `agentrewind worker`).

        Raises:
            WorkflowError: Another function is already registered under `name`.
        """

        def register(fn: Callable[P, R]) -> Workflow[P, R]:
            if not isinstance(name, str) or not name or ":" in name:
                raise WorkflowError(
                    f"a workflow name is a non-empty string without ':', not {name!r}"
                )
            known = self.workflows.get(name)
            if known is not None and known.fn is not fn:
                raise WorkflowError(
                    f"workflow {name!r} is already registered to {known.fn!r}; names are how "
                    "crashed runs find their code again, so each must be unique"
                )
            wf: Workflow[P, R] = Workflow(self, name, fn)
            self.workflows[name] = wf
            return wf

        if obj is not None:
            return register(body_of(obj))
        return register

    def queue(
        self,
        name: str,
        *,
        concurrency: int | None = None,
        worker_concurrency: int | None = None,
        limiter: tuple[int, float] | None = None,
        priority: bool = False,
        partitioned: bool = False,
    ) -> Queue:
        """Declare a durable queue of workflow runs with flow control (see `Queue`).

        Every process that enqueues to a queue or serves it declares it the same way.

        Raises:
            QueueError: A bad name or limit, or `name` declared here with other limits.
        """
        q = Queue(
            self,
            name,
            concurrency=concurrency,
            worker_concurrency=worker_concurrency,
            limiter=limiter,
            priority=priority,
            partitioned=partitioned,
        )
        known = self.queues.setdefault(q.name, q)
        if not known._same(q):
            raise QueueError(f"queue {name!r} is already declared here as {known!r}")
        return known

    def serve(
        self,
        queues: Iterable[Queue | str] = (),
        *,
        concurrency: int = 8,
        poll: float = 0.5,
        recover: bool = True,
        once: bool = False,
        stop: threading.Event | None = None,
    ) -> Worker:
        """Run a worker here until `stop` is set (with `once`: until nothing is left to run).

        It takes runs from `queues` as their limits allow (across every worker of the store),
        and resumes crashed runs of this process's workflows (`recover=False`: not). On stop
        it drains: runs in flight stop at their next step and are released for another
        worker. Returns the stopped `Worker` (`done`: runs ended here).

        Raises:
            QueueError: A queue not declared here, or a bad limit.
        """
        chosen = [self._declared(q) for q in queues]
        worker = Worker(self, queues=chosen, concurrency=concurrency, poll=poll, recover=recover)
        if stop is not None:

            def relay() -> None:
                stop.wait()
                worker.stop.set()
                worker._wake.set()

            threading.Thread(target=relay, name="agentrewind-serve-stop", daemon=True).start()
        worker.serve(once=once)
        return worker

    def _declared(self, queue: Queue | str) -> Queue:
        if isinstance(queue, Queue):
            return queue
        found = self.queues.get(queue)
        if found is None:
            raise QueueError(
                f"unknown queue {queue!r}: declare it with middleware.queue({queue!r}, ...) "
                f"(declared here: {sorted(self.queues) or 'none'})"
            )
        return found

    def recover(self, *, include_failed: bool = False, limit: int = 1000) -> RecoveryReport:
        """Resume every crashed run of a workflow registered in this process, here and now.

        Each run is claimed through its lease (two processes recovering at once resume each
        run exactly once) and run again with its recorded arguments; finished steps replay.
        Runs of workflows this process does not know are left alone and reported; cancelled
        runs are never recovered; failed runs (their code raised) only with `include_failed`.

        Returns:
            A `RecoveryReport`: each run looked at and what became of it.
        """
        report = RecoveryReport()
        for info in lifecycle.candidates(self, include_failed=include_failed, limit=limit):
            got = lifecycle.claim(self, info, include_failed=include_failed)
            report.outcomes.append(
                got if isinstance(got, lifecycle.RecoveryOutcome) else got.resume()
            )
        self.last_recovery = report
        return report

    async def arecover(self, *, include_failed: bool = False, limit: int = 1000) -> RecoveryReport:
        """Async twin of `recover`."""
        report = RecoveryReport()
        for info in await lifecycle.acandidates(self, include_failed=include_failed, limit=limit):
            got = await lifecycle.aclaim(self, info, include_failed=include_failed)
            if isinstance(got, lifecycle.RecoveryOutcome):
                report.outcomes.append(got)
            else:
                report.outcomes.append(await got.aresume())
        self.last_recovery = report
        return report

    def _start_recovery(self) -> None:
        def recover() -> None:
            try:
                report = self.recover()
            except Exception:
                log.exception("recovery at start-up failed")
                return
            for o in report.outcomes:
                log.info("recovered run %r (%s): %s", o.run_id, o.workflow, o.outcome)

        self.recovery = threading.Thread(target=recover, name="agentrewind-recovery", daemon=True)
        self.recovery.start()

    def cancel(self, run_id: str) -> bool:
        """Mark a run cancelled, from any process; False if it already was.

        Its owner raises `RunCancelledError` at its next journal write or step start and
        records nothing after; the run is never recovered until `resume`.

        Raises:
            RunNotFoundError: No such run.
            RunFinishedError: The run already completed or failed (nothing changes).
        """
        return lifecycle.cancel(self, run_id)

    async def acancel(self, run_id: str) -> bool:
        """Async twin of `cancel`."""
        return await lifecycle.acancel(self, run_id)

    def resume(self, run_id: str) -> Any:
        """Clear a run's cancel mark and run its workflow again here (finished steps replay).

        Also resumes a crashed or failed workflow run. Returns the workflow's result.

        Raises:
            RunNotFoundError: No such run.
            WorkflowNotFoundError: The run's workflow is not registered in this process, or
                it was not started by a workflow (nothing changes).
            RunFinishedError: The run already completed.
            RunLockedError: Another live process drives it.
        """
        wf, ctx, call = lifecycle.uncancel(self, run_id)
        return wf._run_in(ctx, call.payload())

    async def aresume(self, run_id: str) -> Any:
        """Async twin of `resume`."""
        wf, ctx, call = await lifecycle.auncancel(self, run_id)
        return await wf._arun_in(ctx, call.payload())
