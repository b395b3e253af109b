"""`RewindRunnable`: what `Middleware.wrap(runnable)` returns."""

from __future__ import annotations

import asyncio
import contextvars
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import get_config_list
from langchain_core.runnables.utils import ConfigurableFieldSpec

from agentrewind import RunContext
from agentrewind.adapters import new_id

from ._scope import ACTIVE, Scope

if TYPE_CHECKING:
    from langchain_core.utils.pydantic import TypeBaseModel

    from agentrewind import Middleware
    from agentrewind.adapters import IncompletePolicy

__all__ = ["RUN_ID_KEY", "RewindRunnable", "resolve_run_id"]

RUN_ID_KEY = "agentrewind_run_id"
"""`configurable` key naming the run; `thread_id` is used when it is absent."""


def resolve_run_id(config: Mapping[str, Any] | None) -> str | None:
    """The run id a config names: `agentrewind_run_id`, else `thread_id`, else None."""
    configurable = (config or {}).get("configurable") or {}
    run_id = configurable.get(RUN_ID_KEY) or configurable.get("thread_id")
    return None if run_id is None else str(run_id)


def _with_run_id(config: RunnableConfig | None, run_id: str) -> RunnableConfig:
    out: dict[str, Any] = dict(config or {})
    out["configurable"] = {**(out.get("configurable") or {}), RUN_ID_KEY: run_id}
    out["metadata"] = {**(out.get("metadata") or {}), RUN_ID_KEY: run_id}
    return out  # type: ignore[return-value]


class RewindRunnable(Runnable[Any, Any]):
    """A runnable whose chat-model and tool calls are recorded, and replayed on a rerun.

    It behaves as the runnable it wraps (`invoke`, `ainvoke`, `stream`, `astream`, `batch`,
    `abatch`, `astream_events`, `with_config`, schemas; other attributes are forwarded).
    Each call opens the run named by `configurable["agentrewind_run_id"]`, else
    `configurable["thread_id"]`, else a new id, readable afterwards as `last_run_id` and
    in the callbacks' metadata under `agentrewind_run_id`.

    Args:
        middleware: The middleware (store, strictness, serializer) to record with.
        bound: The runnable to drive.
        strict: Raise `DivergenceError` when a rerun's calls changed (default: middleware's).
        on_incomplete: Policy for tool calls started but never finished (default: middleware's).
        ttl: Seconds each run is kept after its last write.
        tool_side_effects: Write a `started` record before every tool call (default True);
            a tool's own `metadata={"agentrewind_side_effects": False}` opts it out.
    """

    def __init__(
        self,
        middleware: Middleware,
        bound: Runnable[Any, Any],
        *,
        strict: bool | None = None,
        on_incomplete: IncompletePolicy | None = None,
        ttl: float | None = None,
        tool_side_effects: bool = True,
    ) -> None:
        self.middleware = middleware
        self.bound = bound
        self.strict = strict
        self.on_incomplete = on_incomplete
        self.ttl = ttl
        self.tool_side_effects = tool_side_effects
        self.last_run_id: str | None = None
        """Id of the run the latest `invoke`/`stream` (or batch item) opened."""
        self.last_run_ids: list[str] = []
        """Ids given to the items of the latest `batch`/`abatch`, in input order."""
        self.name = bound.get_name()

    def __repr__(self) -> str:
        return f"RewindRunnable({self.bound!r})"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "bound":
            raise AttributeError(name)
        return getattr(self.bound, name)

    # -- schemas: those of the wrapped runnable ------------------------------------------
    @property
    def InputType(self) -> Any:
        return self.bound.InputType

    @property
    def OutputType(self) -> Any:
        return self.bound.OutputType

    def get_input_schema(self, config: RunnableConfig | None = None) -> TypeBaseModel:
        return self.bound.get_input_schema(config)

    def get_output_schema(self, config: RunnableConfig | None = None) -> TypeBaseModel:
        return self.bound.get_output_schema(config)

    @property
    def config_specs(self) -> list[ConfigurableFieldSpec]:
        return self.bound.config_specs

    def get_graph(self, config: RunnableConfig | None = None) -> Any:
        return self.bound.get_graph(config)

    # -- the run around each call ----------------------------------------------------------
    def _prepare(self, config: RunnableConfig | None) -> tuple[RunnableConfig, RunContext]:
        run_id = resolve_run_id(config) or new_id()
        self.last_run_id = run_id
        context = self.middleware.run(
            run_id, strict=self.strict, on_incomplete=self.on_incomplete, ttl=self.ttl
        )
        return _with_run_id(config, run_id), context

    def _enter(self, context: RunContext) -> None:
        run = context.__enter__()
        ACTIVE.set(Scope(run, self.tool_side_effects))

    async def _aenter(self, context: RunContext) -> None:
        run = await context.__aenter__()
        ACTIVE.set(Scope(run, self.tool_side_effects))

    def _invoke(self, context: RunContext, input: Any, config: Any, kwargs: Any) -> Any:
        self._enter(context)
        try:
            result = self.bound.invoke(input, config, **kwargs)
        except BaseException:
            context.__exit__(*sys.exc_info())
            raise
        context.__exit__(None, None, None)
        return result

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Run the wrapped runnable inside its run (replaying what a previous attempt did)."""
        config, context = self._prepare(config)
        return contextvars.copy_context().run(self._invoke, context, input, config, kwargs)

    async def _ainvoke(self, context: RunContext, input: Any, config: Any, kwargs: Any) -> Any:
        await self._aenter(context)
        try:
            result = await self.bound.ainvoke(input, config, **kwargs)
        except BaseException:
            await context.__aexit__(*sys.exc_info())
            raise
        await context.__aexit__(None, None, None)
        return result

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Async twin of `invoke`."""
        config, context = self._prepare(config)
        coro = self._ainvoke(context, input, config, kwargs)
        return await asyncio.create_task(coro, context=contextvars.copy_context())

    def stream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[Any]:
        """Stream the wrapped runnable; each chunk is produced inside the run's context."""
        config, context = self._prepare(config)
        ctx = contextvars.copy_context()
        ctx.run(self._enter, context)
        iterator = ctx.run(self.bound.stream, input, config, **kwargs)
        try:
            while True:
                try:
                    chunk = ctx.run(next, iterator)
                except StopIteration:
                    break
                yield chunk
        except GeneratorExit:  # the consumer stopped early: the run is paused, not failed
            ctx.run(_close_iter, iterator)
            context.run.status = "paused"
            ctx.run(context.__exit__, None, None, None)
            raise
        except BaseException:
            ctx.run(context.__exit__, *sys.exc_info())
            raise
        ctx.run(context.__exit__, None, None, None)

    async def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        """Async twin of `stream`."""
        config, context = self._prepare(config)
        ctx = contextvars.copy_context()
        await asyncio.create_task(self._aenter(context), context=ctx)
        iterator = ctx.run(self.bound.astream, input, config, **kwargs)
        try:
            while True:
                try:
                    chunk = await asyncio.create_task(_anext(iterator), context=ctx)
                except StopAsyncIteration:
                    break
                yield chunk
        except GeneratorExit:
            await asyncio.create_task(iterator.aclose(), context=ctx)  # type: ignore[attr-defined]
            context.run.status = "paused"
            await asyncio.create_task(context.__aexit__(None, None, None), context=ctx)
            raise
        except BaseException:
            exc_info = sys.exc_info()
            await asyncio.create_task(context.__aexit__(*exc_info), context=ctx)
            raise
        await asyncio.create_task(context.__aexit__(None, None, None), context=ctx)

    # -- batches: one run per item ---------------------------------------------------------
    def _batch_configs(
        self, config: RunnableConfig | Sequence[RunnableConfig] | None, n: int
    ) -> list[RunnableConfig]:
        configs = get_config_list(config, n)
        shared = not isinstance(config, Sequence)
        ids = [resolve_run_id(c) for c in configs]
        repeated = Counter(ids)
        out: list[RunnableConfig] = []
        run_ids: list[str] = []
        for i, (cfg, run_id) in enumerate(zip(configs, ids, strict=True)):
            if run_id is None:
                run_id = new_id()
            elif shared or repeated[run_id] > 1:
                run_id = f"{run_id}:{i}"
            out.append(_with_run_id(cfg, run_id))
            run_ids.append(run_id)
        self.last_run_ids = run_ids
        return out

    def batch(
        self,
        inputs: list[Any],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """Run each input as its own run (`<id>:<i>` when one id is given for all)."""
        if not inputs:
            return []
        configs = self._batch_configs(config, len(inputs))
        return super().batch(inputs, configs, return_exceptions=return_exceptions, **kwargs)

    async def abatch(
        self,
        inputs: list[Any],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """Async twin of `batch`."""
        if not inputs:
            return []
        configs = self._batch_configs(config, len(inputs))
        return await super().abatch(inputs, configs, return_exceptions=return_exceptions, **kwargs)


def _close_iter(iterator: Any) -> None:
    close = getattr(iterator, "close", None)
    if close is not None:
        close()


async def _anext(iterator: Any) -> Any:
    return await iterator.__anext__()
