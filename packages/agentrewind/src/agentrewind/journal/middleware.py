"""`Middleware`: the entry point for recording and replaying runs."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar, overload

from ..documents.locating import Forked, fork
from ..errors import AdapterNotFoundError, WorkflowError
from ..plugins import load_failures, load_group
from ..records import RunInfo, RunMetrics
from ..serde import Redactor, Serializer
from ..stores import Store, connect
from . import lifecycle
from .cache import CacheControl, cache_options
from .call import log
from .context import CURRENT_RUN
from .lifecycle import RecoveryReport
from .opening import RunContext
from .run import IncompletePolicy, Run
from .steps import make_step_decorator
from .workflow import Workflow, body_of

if TYPE_CHECKING:
    from ..serde.encryption import Encryption

__all__ = ["Adapter", "Middleware", "RunContext"]  # RunContext: re-exported from .opening

F = TypeVar("F", bound=Callable[..., Any])
W = TypeVar("W")
P = ParamSpec("P")
R = TypeVar("R")

_EXTRAS = {
    "langchain_core": "langchain",
    "langchain": "langchain",
    "langgraph": "langchain",
    "llama_index": "llamaindex",
    "workflows": "llamaindex",
    "pydantic_ai": "pydantic-ai",
}


class Adapter(Protocol):
    """What an entry point in the `agentrewind.adapters` group must provide."""

    def claims(self, obj: Any) -> bool:
        """True when this adapter knows how to wrap `obj`."""
        ...

    def wrap(self, middleware: Middleware, obj: Any, **kwargs: Any) -> Any:
        """Return `obj` wrapped so its runs are recorded and replayed."""
        ...


class Middleware:
    """Records every step of a run into a store and replays finished steps on resume.

    Args:
        store: A `Store`, a store URL, or None for the default
            (`$AGENTREWIND_STORE`, else `sqlite:///.agentrewind/agentrewind.db`).
        strict: Raise `DivergenceError` instead of warning when a resumed run's calls changed.
        on_incomplete: What to do on resume with a step that started but never completed:
            `rerun` (default), `skip`, or `raise`.
        lease_ttl: Seconds a run's lease lasts without renewal (it is renewed every third).
        allow_pickle: Store values JSON cannot hold with pickle, and load them. Off by default.
        allowed_types: Dataclasses, pydantic models and enums that may be rebuilt on load
            (those this process recorded itself always may).
        record_failures: Journal failures so a replay raises them again instead of re-running.
        redact: `redact(field, value) -> value`, applied to each output before it is stored
            (mask secrets or personal data); a replay returns the redacted value.
        encryption: An `agentrewind.serde.encryption.Encryption` to encrypt outputs at rest
            (AES-GCM); None uses `$AGENTREWIND_ENCRYPTION_KEY` when set; False: never.
        recover_on_start: On the first `run` (or workflow run) of this middleware, recover
            the crashed runs of its registered workflows in a background thread
            (`recover()`), as a durable execution engine does at launch.

    Example:
        >>> mw = Middleware("memory://")
        >>> with mw.run("order-42") as run:
        ...     run.step("double", lambda x: 2 * x, 21)
        42
    """

    def __init__(
        self,
        store: Store | str | None = None,
        *,
        strict: bool = False,
        on_incomplete: IncompletePolicy = "rerun",
        lease_ttl: float = 30.0,
        allow_pickle: bool = False,
        allowed_types: Iterable[type] = (),
        record_failures: bool = False,
        redact: Redactor | None = None,
        encryption: Encryption | bool | None = None,
        recover_on_start: bool = False,
    ) -> None:
        if on_incomplete not in ("rerun", "skip", "raise"):
            raise ValueError(f"on_incomplete must be rerun, skip or raise, not {on_incomplete!r}")
        self._owns_store = not isinstance(store, Store)
        self.store: Store = store if isinstance(store, Store) else connect(store)
        self.strict = strict
        self.on_incomplete: IncompletePolicy = on_incomplete
        self.lease_ttl = lease_ttl
        self.record_failures = record_failures
        self.serializer = Serializer(
            allow_pickle=allow_pickle,
            allowed_types=allowed_types,
            redact=redact,
            encryption=encryption,
        )
        self.workflows: dict[str, Workflow[Any, Any]] = {}
        """The workflows registered in this process, by name."""
        self.recover_on_start = recover_on_start
        self.recovery: threading.Thread | None = None
        """The background recovery of `recover_on_start`, once started."""
        self.last_recovery: RecoveryReport | None = None
        """What the last `recover()` of this middleware did."""
        self.draining = threading.Event()
        """Set, the runs of this middleware stop at their next step (`RunInterruptedError`),
        leaving their status as it is for another worker: how `agentrewind worker` drains."""

    def __repr__(self) -> str:
        return f"Middleware({self.store!r})"

    def run(
        self,
        run_id: str | None = None,
        *,
        strict: bool | None = None,
        on_incomplete: IncompletePolicy | None = None,
        ttl: float | None = None,
    ) -> RunContext:
        """Open a run: a context manager (`with` or `async with`) yielding a `Run`.

        Args:
            run_id: The unit of resume: the same id continues where it stopped. None makes a
                new id (read it back from `run.run_id`).
            strict: Overrides the middleware's `strict`.
            on_incomplete: Overrides the middleware's `on_incomplete`.
            ttl: Seconds the run is kept after its last write (None: kept until pruned).

        Raises:
            RunLockedError: On enter, when another live process drives this run.
            RunCancelledError: On enter, when the run was cancelled (see `resume`).
        """
        if self.recover_on_start and self.recovery is None:
            self._start_recovery()
        return RunContext(
            Run(
                self,
                run_id,
                strict=self.strict if strict is None else strict,
                on_incomplete=on_incomplete or self.on_incomplete,
                ttl=ttl,
                lease_ttl=self.lease_ttl,
            )
        )

    @overload
    def step(self, name: F, /) -> F: ...
    @overload
    def step(
        self,
        name: str | None = None,
        /,
        *,
        kind: str = "custom",
        side_effects: bool = True,
        key: Callable[..., Any] | None = None,
        cache_ttl: float | None = None,
        max_entries: int | None = None,
        cache_key: Callable[..., Any] | None = None,
    ) -> Callable[[F], F]: ...
    def step(
        self,
        name: str | F | None = None,
        /,
        *,
        kind: str = "custom",
        side_effects: bool = True,
        key: Callable[..., Any] | None = None,
        cache_ttl: float | None = None,
        max_entries: int | None = None,
        cache_key: Callable[..., Any] | None = None,
    ) -> F | Callable[[F], F]:
        """Decorate a function (sync or async) so calls inside a run are recorded/replayed.

        Outside a run of this middleware the function is called normally (still cached when
        `cache_ttl` is given, in this middleware's store).

        Args:
            name: The step name (default: the function's qualified name).
            kind: The step kind stored with the record.
            side_effects: Write a `started` record before running (see `on_incomplete`).
            key: `key(*args, **kwargs)` returns what identifies a call (default: all arguments).
            cache_ttl: Seconds a result is also served across runs from the store's cache
                (`journal.cache`): the same call in a later run does not run again.
            max_entries: Entries the cache keeps for this step (least recently used go first).
            cache_key: `cache_key(*args, **kwargs)` identifies a call for the cache.
        """
        if callable(name):
            return self.step()(name)
        cache = cache_options(cache_ttl, max_entries, cache_key)
        return make_step_decorator(
            self._current,
            name,
            kind=kind,
            side_effects=side_effects,
            key=key,
            cache=cache,
            settings=self,
        )

    @property
    def cache(self) -> CacheControl:
        """The cross-run cache of this middleware's store: `clear(site=)`, `stats()`."""
        return CacheControl(self.store)

    def _current(self) -> Run | None:
        run = CURRENT_RUN.get()
        return run if run is not None and run.middleware is self else None

    def wrap(self, obj: W, **kwargs: Any) -> W:
        """Wrap a framework object (LangChain Runnable, LlamaIndex workflow...) for replay.

        Dispatches to the installed adapter that claims `obj` (entry-point group
        `agentrewind.adapters`). The wrapper behaves as `obj` (every other attribute is the
        wrapped object's), so it is typed as `obj`'s type.

        Raises:
            AdapterNotFoundError: No installed adapter claims `obj`; the message names the
                extra to install.
        """
        for adapter in _adapters():
            if adapter.claims(obj):
                wrapped: W = adapter.wrap(self, obj, **kwargs)
                return wrapped
        module = type(obj).__module__.split(".", 1)[0]
        extra = _EXTRAS.get(module)
        hint = (
            f'install the adapter: pip install "agentrewind[{extra}]"'
            if extra
            else "agentrewind has adapters for LangChain/LangGraph runnables, LlamaIndex "
            "workflows and pydantic-ai agents (extras: langchain, langgraph, llamaindex, "
            "pydantic-ai); for plain Python use "
            "middleware.run() and middleware.step()"
        )
        broken = "; ".join(f"{name}: {exc}" for name, exc in load_failures("agentrewind.adapters"))
        if broken:
            hint += f" (installed adapters that failed to load: {broken})"
        raise AdapterNotFoundError(
            f"no installed agentrewind adapter can wrap {type(obj).__module__}."
            f"{type(obj).__qualname__}: {hint}"
        )

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
        return wf._run_in(ctx, {"args": list(call.args), "kwargs": dict(call.kwargs)})

    async def aresume(self, run_id: str) -> Any:
        """Async twin of `resume`."""
        wf, ctx, call = await lifecycle.auncancel(self, run_id)
        return await wf._arun_in(ctx, {"args": list(call.args), "kwargs": dict(call.kwargs)})

    def fork(self, run_id: str, *, at: str | int, to: str) -> Forked:
        """Copy a run's history up to a step into a new run `to`, for every kind of run.

        `at` names the step as `agentrewind log` prints it (a sequence number or an id
        prefix) or a branch; a journal run, a timeline and a LangGraph thread (through its run
        source: checkpoints) all fork through this one entry point. A workflow run forked
        keeps its recorded arguments, so `resume(to)` (or a worker) runs it on from `at`.

        Raises:
            RunNotFoundError: No such run or step.
            DocumentError: `to` exists already, or the run's source cannot fork.
        """
        return fork(self.store, run_id, str(at), to)

    async def afork(self, run_id: str, *, at: str | int, to: str) -> Forked:
        """Async twin of `fork` (in a worker thread: forking is a rare, bulk operation)."""
        return await asyncio.to_thread(self.fork, run_id, at=at, to=to)

    def metrics(self, run_id: str) -> RunMetrics:
        """Totals over every execution of the run (steps, replay hits, seconds/tokens saved)."""
        info = self.store.get_run(run_id)
        return RunMetrics() if info is None else info.metrics

    def crashed_runs(self, *, limit: int = 1000) -> list[RunInfo]:
        """Runs whose owner died mid-run (status `crashed`), most recently updated first.

        A service calls this at start-up and resumes each one (`middleware.run(info.run_id)`).
        """
        return self.store.crashed_runs(limit=limit)

    async def acrashed_runs(self, *, limit: int = 1000) -> list[RunInfo]:
        """Async twin of `crashed_runs`."""
        return await self.store.acrashed_runs(limit=limit)

    def close(self) -> None:
        """Close the store if this middleware opened it from a URL."""
        if self._owns_store:
            self.store.close()


def _adapters() -> tuple[Adapter, ...]:
    return load_group("agentrewind.adapters")
