"""`Middleware`: the entry point for recording and replaying runs."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar, overload

from ..documents.locating import Forked, crashed_source_runs, fork
from ..errors import AdapterNotFoundError
from ..numbers import run_numbers
from ..plugins import load_failures, load_group
from ..records import RunInfo, RunMetrics
from ..serde import Redactor, Serializer
from ..stores import Store, connect
from .cache import CacheControl, CacheSites, cache_options
from .context import CURRENT_RUN
from .durable import Durable
from .lifecycle import RecoveryReport
from .opening import RunContext
from .queues import Queue
from .run import IncompletePolicy, Run
from .steps import make_step_decorator
from .workflow import Workflow

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


class Middleware(Durable):
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
        record_inputs: Record what each call was given (prompts, tool and step arguments)
            beside its output, through the same `redact` hook (field `inputs`) and
            encryption; False records outputs only (a call site can also turn it off).

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
        record_inputs: bool = True,
    ) -> None:
        if on_incomplete not in ("rerun", "skip", "raise"):
            raise ValueError(f"on_incomplete must be rerun, skip or raise, not {on_incomplete!r}")
        self._owns_store = not isinstance(store, Store)
        self.store: Store = store if isinstance(store, Store) else connect(store)
        self.strict = strict
        self.on_incomplete: IncompletePolicy = on_incomplete
        self.lease_ttl = lease_ttl
        self.record_failures = record_failures
        self.record_inputs = record_inputs
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
        self.queues: dict[str, Queue] = {}
        """The queues declared in this process (`queue`), by name."""
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
        record_inputs: bool | None = None,
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
        record_inputs: bool | None = None,
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
            record_inputs: False: the call's arguments are not recorded (default: the
                middleware's `record_inputs`).
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
            record_inputs=record_inputs,
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

        Cross-run cache (opt-in): `cache_ttl=` seconds and `cache=["tool:search", "chat:*"]`,
        fnmatch patterns over the journal's `kind:name` of the calls the adapter journals
        (`chat:` stands for `llm:`, the kind of chat models), plus `max_entries=` per site.
        A matching call that its run does not replay is served from the store's cache (and
        recorded in the run, marked `cached`), or runs and is stored there. The rules are the
        wrapped object's own (the adapter gets them as `cache=`, a `CacheSites`): another
        object wrapped by this middleware keeps its own, or none.

        Raises:
            AdapterNotFoundError: No installed adapter claims `obj`; the message names the
                extra to install.
            CacheConfigError: `cache_ttl` not a positive number, a `cache` pattern that is not
                a `kind:name` string, or one of the two without the other.
        """
        sites = CacheSites.take(kwargs)
        if sites is not None:
            kwargs["cache"] = sites
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
        """The run's figures over all its executions, as every surface shows them.

        Steps are counted from its records; replays, failures, attempts, executions and the
        seconds and tokens saved are the totals its executions wrote as they went (a killed
        execution's too). Zeros for an unknown run. See `agentrewind.numbers`.
        """
        return run_numbers(self.store, run_id)

    def crashed_runs(self, *, limit: int = 1000) -> list[RunInfo]:
        """Runs whose owner died mid-run (status `crashed`), most recently updated first.

        A service calls this at start-up and resumes each one (`middleware.run(info.run_id)`).
        Framework-native runs of installed run sources are included: a LangGraph thread whose
        process died mid-run, `meta["source"] == "langgraph"`, resumes by invoking its graph
        with the same `thread_id` and `None` as input.
        """
        runs = self.store.crashed_runs(limit=limit) + crashed_source_runs(self.store, limit)
        return sorted(runs, key=lambda r: r.updated_at, reverse=True)[:limit]

    async def acrashed_runs(self, *, limit: int = 1000) -> list[RunInfo]:
        """Async twin of `crashed_runs`."""
        return await asyncio.to_thread(self.crashed_runs, limit=limit)

    def close(self) -> None:
        """Close the store if this middleware opened it from a URL."""
        if self._owns_store:
            self.store.close()


def _adapters() -> tuple[Adapter, ...]:
    return load_group("agentrewind.adapters")
