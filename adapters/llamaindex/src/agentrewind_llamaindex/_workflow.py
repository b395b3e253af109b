"""`RewindWorkflow`: a workflow whose runs are journaled and resume by run id."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from workflows import Context, Workflow
from workflows.context.serializers import JsonSerializer, PickleSerializer
from workflows.errors import WorkflowCancelledByUser
from workflows.handler import WorkflowHandler

from agentrewind import Middleware, Run, RunContext, Serializer
from agentrewind.adapters import CacheSites, new_id

from ._calls import CACHE, install_call_hooks
from ._journal import Journal
from ._memory import ACTIVE_MEMORIES, MemoryRegistry
from ._runtime import RewindRuntime, RunState
from ._serializer import RewindSerializer
from ._state import DurableState

log = logging.getLogger("agentrewind.llamaindex")

__all__ = ["RewindWorkflow"]

_P = ParamSpec("_P")
_T = TypeVar("_T")


class _RunScope:
    """Holds an agentrewind run open for a workflow run that lives in a background task.

    The run is entered inside a copied context; the workflow's tasks are created in that
    context, so `agentrewind.current_run()` is the run inside every step, while the caller's
    own context stays untouched. The run is closed in the same context when the result is in.
    """

    def __init__(self, run_context: RunContext) -> None:
        self._rc = run_context
        self.context = contextvars.copy_context()

    def enter(self) -> Run:
        return self.context.run(self._rc.__enter__)

    def call(self, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        return self.context.run(fn, *args, **kwargs)

    def exit(self, exc: BaseException | None) -> None:
        self.context.run(self._rc.__exit__, type(exc) if exc else None, exc, None)

    async def aexit(self, exc: BaseException | None) -> None:
        await asyncio.create_task(
            self._rc.__aexit__(type(exc) if exc else None, exc, None), context=self.context
        )


def _base_serializer(workflow: Workflow) -> JsonSerializer:
    serializer = workflow.runtime.get_serializer(workflow)
    if isinstance(serializer, JsonSerializer) and not isinstance(serializer, PickleSerializer):
        return serializer
    return JsonSerializer()  # never pickle: the journal is JSON even if the workflow pickles


class RewindWorkflow:
    """A LlamaIndex workflow (or agent) whose runs are checkpointed tick by tick.

    Every other attribute is the wrapped workflow's. Get one from `Middleware.wrap(workflow)`.

    Args:
        middleware: Where runs are journaled.
        workflow: The workflow, agent or `AgentWorkflow`; its runtime (the default one, or
            an explicit runtime it is registered on, launched or not) is decorated by a
            `RewindRuntime`, which journals the runs started through this wrapper.
        cache: The cross-run cache rules of this wrapper (`middleware.wrap(workflow,
            cache_ttl=, cache=[...])`); the LLM and tool calls of its runs follow them.
    """

    def __init__(
        self, middleware: Middleware, workflow: Workflow, cache: CacheSites | None = None
    ) -> None:
        if not isinstance(workflow, Workflow):
            raise TypeError(f"expected a llama-index Workflow, got {type(workflow).__name__}")
        runtime = workflow.runtime
        if not isinstance(runtime, RewindRuntime):
            runtime = RewindRuntime(runtime)
            if workflow._runtime_locked:
                # Registered on a launched runtime (or run before): the decorator forwards
                # registration to that runtime, so only the adapters it hands out change.
                workflow._runtime = runtime
            else:
                workflow._switch_runtime(runtime)
        self._middleware = middleware
        self._cache = cache
        self._workflow = workflow
        self._runtime = runtime
        install_call_hooks()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._workflow, name)

    def __repr__(self) -> str:
        return f"RewindWorkflow({self._workflow!r}, {self._middleware.store!r})"

    @property
    def workflow(self) -> Workflow:
        """The wrapped workflow."""
        return self._workflow

    def run(self, *args: Any, **kwargs: Any) -> WorkflowHandler:
        """Start a run, or resume the unfinished run `run_id`: the workflow's `run` arguments.

        With the id of a run that crashed, the journal replays and the steps that were in
        flight run again; after a failed step, that step runs again on the `ctx.store` state
        from before it. LLM and tool calls that completed replay from the journal. Start
        arguments are used as the workflow uses them: ignored when a run resumes.

        Every argument goes to the wrapped workflow's `run` (agents take `user_msg`,
        `chat_history`, `memory`, ...). An explicit `ctx` (a `Context` from an earlier run,
        or from `Context.from_dict`) is honoured as the workflow would: the run continues
        from it, and its journal starts from that context.

        Args:
            *args: Positional arguments of the workflow's `run`.
            **kwargs: Keyword arguments of the workflow's `run`; `run_id` names the run to
                start or resume (default: a new id, see `handler.run_id`).

        Raises:
            RunLockedError: Another live process drives this run.
        """
        install_call_hooks()
        run_id = kwargs.pop("run_id", None) or new_id()
        scope = _RunScope(self._middleware.run(run_id))
        run = scope.enter()
        try:
            handler = self._start(scope, run, run_id, args, kwargs)
        except BaseException as exc:
            self._runtime.forget(run_id)
            scope.exit(exc)
            raise
        return handler

    def _start(
        self,
        scope: _RunScope,
        run: Run,
        run_id: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> WorkflowHandler:
        wf = self._workflow
        memories = MemoryRegistry(Serializer(allowed_types=()))
        own = wf.serializer
        serializer = RewindSerializer(
            _base_serializer(wf),
            memories,
            run.middleware.serializer,
            own if isinstance(own, PickleSerializer) else None,
        )
        explicit = _explicit_context(args, kwargs)
        # An explicit context says where the run continues: the journal starts again from it.
        journal = Journal.load(run.records(), wf, serializer, fresh=explicit is not None)
        if journal.stale:
            run.middleware.store.put_steps(
                [
                    dataclasses.replace(
                        r, status="failed", output=None, meta={**r.meta, "dropped": True}
                    )
                    for r in journal.stale
                ],
                owner=run.owner,
            )
        journal.settle_calls(run)
        log.debug(
            "workflow run %r: %s (%d journaled tick(s) replay, %d dropped after the cut)",
            run_id,
            "resumes" if journal.resumable else "starts",
            len(journal.ticks),
            len(journal.stale),
        )
        memories.restore(journal.memories)
        base = None
        if explicit is not None:
            base = explicit.to_dict(serializer, include_state=False)
        elif journal.resumable:
            kwargs["ctx"] = journal.context(wf, serializer)

        async def on_close(exc: BaseException | None) -> None:
            if isinstance(exc, WorkflowCancelledByUser | asyncio.CancelledError):
                run.status = "paused"
            self._runtime.forget(run_id)
            await scope.aexit(exc)

        state = RunState(
            run=run,
            serializer=serializer,
            durable=DurableState(serializer, journal.state if journal.resumable else None),
            memories=memories,
            next_tick=0,
            replay_events=journal.events,
            on_close=on_close,
            base=base,
        )
        self._runtime.prepare(run_id, state)
        scope.call(ACTIVE_MEMORIES.set, memories)  # the run's steps log memory writes here
        scope.call(CACHE.set, self._cache)
        return scope.call(wf.run, *args, run_id=run_id, **kwargs)


def _explicit_context(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Context | None:
    """The `Context` the caller passed to `run` (by keyword or position), if any."""
    ctx = kwargs.get("ctx")
    if isinstance(ctx, Context):
        return ctx
    return next((a for a in args if isinstance(a, Context)), None)
