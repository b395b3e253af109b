"""Workflows: registered entry points whose runs any process can start, resume and recover.

A workflow's run records, as its first journal entry, the workflow's name and its arguments
(through the store's serializer, so encryption and redaction apply and nothing is pickled
unless the middleware allows it); its result is recorded last. Any process that registers
the same name can then run it again from the run id alone: that is what `recover` and the
worker do with crashed runs, and what `resume` does with a cancelled one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeVar, cast

from ..errors import SerializationError, WorkflowError
from ..records import StepRecord
from ..serde import Serializer
from ..serde.encryption import step_place
from ..stores import Store

if TYPE_CHECKING:
    from .opening import RunContext
    from .run import Run

__all__ = [
    "INPUT_KIND",
    "RESULT_KIND",
    "RecordedCall",
    "Workflow",
    "body_of",
    "recorded_call",
]

P = ParamSpec("P")
R = TypeVar("R")

INPUT_KIND = "workflow"
"""Kind of the record holding a workflow run's name and arguments."""
RESULT_KIND = "workflow.result"
"""Kind of the record holding a workflow run's result."""


class Host(Protocol):
    """What workflows and recovery need of a `Middleware`."""

    store: Store
    serializer: Serializer
    lease_ttl: float
    workflows: dict[str, Workflow[Any, Any]]

    def run(self, run_id: str | None = None) -> RunContext:
        """Open run `run_id` (see `Middleware.run`)."""
        ...


class DurableHost(Host, Protocol):
    """What queues and workers need of a `Middleware` besides `Host`."""

    draining: threading.Event

    def cancel(self, run_id: str) -> bool:
        """Cancel run `run_id` (see `Middleware.cancel`)."""
        ...

    async def acancel(self, run_id: str) -> bool:
        """Async twin of `cancel`."""
        ...


@dataclasses.dataclass(frozen=True, slots=True)
class RecordedCall:
    """What a workflow run was started with: its workflow's name and its arguments."""

    workflow: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    queue: str | None = None
    """The queue the run was enqueued to (None: started directly)."""

    def payload(self) -> dict[str, Any]:
        """The arguments as the run's first journal entry holds them (so it replays)."""
        out: dict[str, Any] = {"args": list(self.args), "kwargs": dict(self.kwargs)}
        return out if self.queue is None else out | {"queue": self.queue}


def input_record(records: Sequence[StepRecord]) -> StepRecord | None:
    """The record of a run that holds its workflow's name and arguments, if any."""
    for record in records:
        if record.kind == INPUT_KIND and record.status == "completed":
            return record
    return None


def recorded_call(store: Store, middleware: Host, run_id: str) -> RecordedCall | None:
    """The workflow name and arguments recorded with `run_id` (None: not a workflow run)."""
    record = input_record(store.load_steps(run_id))
    return None if record is None else decode_call(middleware, record)


async def arecorded_call(store: Store, middleware: Host, run_id: str) -> RecordedCall | None:
    """Async twin of `recorded_call`."""
    record = input_record(await store.aload_steps(run_id))
    return None if record is None else decode_call(middleware, record)


def decode_call(middleware: Host, record: StepRecord) -> RecordedCall:
    """The workflow name and arguments a run's input record holds (`WorkflowError`: not)."""
    place = step_place(middleware.store.namespace, record.run_id, record.key)
    where = str(place)
    payload = middleware.serializer.open(record.output, place)
    if not (isinstance(payload, dict) and isinstance(payload.get("args"), list)):
        raise WorkflowError(f"{where}: not a workflow's arguments")
    queue = payload.get("queue")
    return RecordedCall(
        record.name,
        tuple(payload["args"]),
        dict(payload.get("kwargs") or {}),
        queue if isinstance(queue, str) else None,
    )


class Workflow(Generic[P, R]):
    """A function registered under a stable name: its runs know how to restart themselves.

    Get one from `@middleware.workflow("name")`. `wf.run(*args, run_id=...)` runs it as a run
    of the middleware (steps, wrapped calls and `@agentrewind.step` inside replay as usual);
    calling it again with the same run id resumes it, and a finished run returns its recorded
    result. `wf(*args)` is `wf.run(*args)` with a new run id. An async function runs with
    `await wf.arun(...)` (or `wf.run`, which then needs no running event loop).
    """

    def __init__(self, middleware: Host, name: str, fn: Callable[P, R]) -> None:
        self.middleware = middleware
        self.name = name
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        return f"Workflow({self.name!r}, {getattr(self.fn, '__qualname__', self.fn)!r})"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._run_in(self.middleware.run(None), self._payload(args, kwargs))

    def _payload(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        payload = {"args": list(args), "kwargs": dict(kwargs)}
        try:  # before anything is written: arguments that cannot be stored change nothing
            self.middleware.serializer.to_tree(payload)
        except SerializationError as exc:
            raise SerializationError(
                f"workflow {self.name!r}: its arguments cannot be stored, so its run could "
                f"not be recovered; nothing was run or written: {exc}",
                path=exc.path,
            ) from exc
        return payload

    def run(self, *args: Any, run_id: str | None = None, **kwargs: Any) -> R:
        """Run (or resume, or return the recorded result of) the workflow as run `run_id`.

        Pass `run_id=` as a keyword (None or absent: a new id). The name `run_id` is
        therefore reserved among the workflow's own keyword arguments.

        Raises:
            SerializationError: The arguments cannot be stored (nothing runs).
            RunLockedError: Another live process drives this run.
            RunCancelledError: The run was cancelled (before or while it ran).
        """
        run_id = _run_id(run_id)
        payload = self._payload(args, kwargs)
        return self._run_in(self.middleware.run(run_id), payload)

    async def arun(self, *args: Any, run_id: str | None = None, **kwargs: Any) -> R:
        """Async twin of `run` (a sync workflow body runs in a worker thread)."""
        run_id = _run_id(run_id)
        payload = self._payload(args, kwargs)
        return await self._arun_in(self.middleware.run(run_id), payload)

    def _run_in(self, ctx: RunContext, payload: dict[str, Any]) -> R:
        if self.is_async:
            result: R = asyncio.run(self._arun_in(ctx, payload))
            return result
        with ctx as run:
            result_call = _begin(run, self.name, payload)
            if result_call.hit:
                value: R = result_call.value()
                return value
            result_call.start()
            try:
                out = self.fn(*payload["args"], **payload["kwargs"])
            except BaseException as exc:
                result_call.side_effects = True  # journal the error: handles report it
                result_call.fail(exc)
                raise
            result_call.complete(out)
            return out

    async def _arun_in(self, ctx: RunContext, payload: dict[str, Any]) -> R:
        async with ctx as run:
            result_call = await _abegin(run, self.name, payload)
            if result_call.hit:
                value: R = result_call.value()
                return value
            await result_call.astart()
            try:
                if self.is_async:
                    body: Awaitable[R] = self.fn(*payload["args"], **payload["kwargs"])  # type: ignore[assignment]
                    out = await body
                else:
                    out = await asyncio.to_thread(self.fn, *payload["args"], **payload["kwargs"])
            except BaseException as exc:
                result_call.side_effects = True
                await result_call.afail(exc)
                raise
            await result_call.acomplete(out)
            return out


def body_of(obj: Any) -> Callable[..., Any]:
    """The function a workflow runs for `obj`: itself, or a call of a framework object.

    A LangChain runnable or agent, or a compiled LangGraph graph (anything with `invoke`), is
    invoked with the workflow's run id as `thread_id`, so a wrapped one journals into the
    workflow's run and a checkpointed graph resumes its thread (with `None` as input while its
    thread waits at a node); a LlamaIndex workflow (an async `run`) is awaited with the
    workflow's keyword arguments. Anything else must be a plain callable.
    """
    if inspect.isfunction(obj) or inspect.ismethod(obj) or inspect.isbuiltin(obj):
        return cast("Callable[..., Any]", obj)
    if hasattr(obj, "invoke"):

        def invoke(input: Any = None, config: dict[str, Any] | None = None, **kw: Any) -> Any:
            from .context import current_run

            run = current_run()
            config = dict(config or {})
            configurable = dict(config.get("configurable") or {})
            if run is not None:
                configurable.setdefault("thread_id", run.run_id)
            config["configurable"] = configurable
            graph = hasattr(obj, "get_state") and getattr(obj, "checkpointer", None) is not None
            if graph and obj.get_state(config).next:  # a thread cut off mid-graph: go on
                input = None
            return obj.invoke(input, config, **kw)

        invoke.__qualname__ = f"invoke[{type(obj).__qualname__}]"
        return invoke
    run_method = getattr(obj, "run", None)
    if run_method is not None and not isinstance(obj, type):

        async def run(**kwargs: Any) -> Any:
            from .context import current_run

            active = current_run()
            if active is not None:
                kwargs.setdefault("run_id", active.run_id)
            return await run_method(**kwargs)  # a LlamaIndex handler is awaitable

        run.__qualname__ = f"run[{type(obj).__qualname__}]"
        return run
    if callable(obj):
        return cast("Callable[..., Any]", obj)
    raise WorkflowError(
        f"cannot register a {type(obj).__name__} as a workflow: pass a function, a LangChain "
        "runnable or agent, a compiled LangGraph graph or a LlamaIndex workflow"
    )


def _run_id(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"run_id must be a string or None, not {type(value).__name__}")


def _begin(run: Run, name: str, payload: dict[str, Any]) -> Any:
    """Record the arguments (once) and open the result's call: a hit holds the result."""
    call = run.begin(INPUT_KIND, name, payload)
    if not call.hit:
        call.start()
        call.complete(payload)
    return run.begin(RESULT_KIND, name, None)


async def _abegin(run: Run, name: str, payload: dict[str, Any]) -> Any:
    call = run.begin(INPUT_KIND, name, payload)
    if not call.hit:
        await call.astart()
        await call.acomplete(payload)
    return run.begin(RESULT_KIND, name, None)
