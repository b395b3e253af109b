"""`RewindRunnable`: what `Middleware.wrap(runnable)` returns."""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.base import RunnableBindingBase
from langchain_core.runnables.config import get_config_list
from langchain_core.runnables.utils import ConfigurableFieldSpec
from pydantic import BaseModel

from agentrewind import RunContext
from agentrewind.adapters import new_id

from . import _batches
from ._drive import acall, adrive, call, drive
from ._scope import ACTIVE, RUN_ID_KEY, Options, resolve_run_id

if TYPE_CHECKING:
    from langchain_core.utils.pydantic import TypeBaseModel

    from agentrewind import Middleware
    from agentrewind.adapters import CacheSites, IncompletePolicy

__all__ = ["RUN_ID_KEY", "RewindRunnable", "resolve_run_id"]


class _Last:
    """The run ids a wrapper (and the wrappers derived from it) opened last."""

    __slots__ = ("run_id", "run_ids")

    def __init__(self) -> None:
        self.run_id: str | None = None
        self.run_ids: list[str] = []


class RewindRunnable(Runnable[Any, Any]):
    """A runnable whose chat-model and tool calls are recorded, and replayed on a rerun.

    It behaves as the runnable it wraps, for every public method: `invoke`, `stream`,
    `batch`, `batch_as_completed`, `transform`, `astream_log`, `astream_events` and
    `stream_events` (v1, v2 and v3), their async twins, schemas and graphs; other
    attributes (`get_state`, `nodes`, ...) are the wrapped runnable's, and a method of it
    that returns a new runnable of its class (`copy`, `with_config` on a graph) returns it
    wrapped. Each call opens the run named by `configurable["agentrewind_run_id"]`, else
    `configurable["thread_id"]`, else a new id, readable afterwards as `last_run_id` and,
    inside the run, as `agentrewind.current_run().run_id`. The config, callbacks and
    metadata the wrapped runnable sees are exactly the caller's. Inside a run that is
    already active (a wrapped runnable called by another), it runs as is and its calls are
    journaled by the outer run.

    Args:
        middleware: The middleware (store, strictness, serializer) to record with.
        bound: The runnable to drive.
        strict: Raise `DivergenceError` when a rerun's calls changed (default: middleware's).
        on_incomplete: Policy for tool calls started but never finished (default: middleware's).
        ttl: Seconds each run is kept after its last write.
        tool_side_effects: Write a `started` record before every tool call (default True);
            a tool's own `metadata={"agentrewind_side_effects": False}` opts it out.
        cache: The cross-run cache rules of this wrapper (`middleware.wrap(obj, cache_ttl=,
            cache=[...], max_entries=)` gives them); its calls alone follow them.
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
        cache: CacheSites | None = None,
    ) -> None:
        self.middleware = middleware
        self.bound = bound
        self.strict = strict
        self.on_incomplete = on_incomplete
        self.ttl = ttl
        self.tool_side_effects = tool_side_effects
        self.cache = cache
        self._last = _Last()
        self.name = bound.get_name()

    @property
    def _options(self) -> Options:
        return Options(self.tool_side_effects, self.cache)

    @property
    def last_run_id(self) -> str | None:
        """Id of the run the latest call (or batch item) opened."""
        return self._last.run_id

    @property
    def last_run_ids(self) -> list[str]:
        """Ids given to the items of the latest batch, in input order."""
        return self._last.run_ids

    def __repr__(self) -> str:
        return f"RewindRunnable({self.bound!r})"

    def _sibling(self, bound: Runnable[Any, Any]) -> RewindRunnable:
        """A wrapper around `bound` with these settings, sharing `last_run_id`."""
        other = RewindRunnable(
            self.middleware,
            bound,
            strict=self.strict,
            on_incomplete=self.on_incomplete,
            ttl=self.ttl,
            tool_side_effects=self.tool_side_effects,
            cache=self.cache,
        )
        other._last = self._last
        return other

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("bound", "_last", "cache"):
            raise AttributeError(name)
        value = getattr(self.bound, name)
        if inspect.ismethod(value) and value.__self__ is self.bound:
            return self._rewrapping(value)
        return value

    def _rewrapping(self, method: Callable[..., Any]) -> Callable[..., Any]:
        inner = self.bound

        @functools.wraps(method)
        def forward(*args: Any, **kwargs: Any) -> Any:
            result = method(*args, **kwargs)
            if result is inner:
                return self
            if type(result) is type(inner):
                return self._sibling(result)
            return result

        return forward

    # -- what describes the runnable: the wrapped one's ------------------------------------
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

    def get_input_jsonschema(self, config: RunnableConfig | None = None) -> dict[str, Any]:
        return self.bound.get_input_jsonschema(config)

    def get_output_jsonschema(self, config: RunnableConfig | None = None) -> dict[str, Any]:
        return self.bound.get_output_jsonschema(config)

    @property
    def config_specs(self) -> list[ConfigurableFieldSpec]:
        return self.bound.config_specs

    def config_schema(self, *, include: Sequence[str] | None = None) -> type[BaseModel]:
        return self.bound.config_schema(include=include)

    def get_config_jsonschema(self, *, include: Sequence[str] | None = None) -> dict[str, Any]:
        return self.bound.get_config_jsonschema(include=include)

    def get_graph(self, config: RunnableConfig | None = None) -> Any:
        return self.bound.get_graph(config)

    def get_prompts(self, config: RunnableConfig | None = None) -> Any:
        return self.bound.get_prompts(config)

    def get_name(self, suffix: str | None = None, *, name: str | None = None) -> str:
        return self.bound.get_name(suffix, name=name)

    # -- the run around each call ----------------------------------------------------------
    def _open_as(self, run_id: str) -> RunContext | None:
        if ACTIVE.get() is not None:  # inside a wrapped run already: the outer run records
            return None
        self._last.run_id = run_id
        return self.middleware.run(
            run_id, strict=self.strict, on_incomplete=self.on_incomplete, ttl=self.ttl
        )

    def _opener(self, config: RunnableConfig | None) -> Callable[[], RunContext | None]:
        def open_run() -> RunContext | None:
            if ACTIVE.get() is not None:
                return None
            return self._open_as(resolve_run_id(config) or new_id())

        return open_run

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Run the wrapped runnable inside its run (replaying what a previous attempt did)."""
        return call(
            self._opener(config)(),
            self._options,
            lambda: self.bound.invoke(input, config, **kwargs),
        )

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Async twin of `invoke`."""
        return await acall(
            self._opener(config)(),
            self._options,
            lambda: self.bound.ainvoke(input, config, **kwargs),
        )

    def stream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[Any]:
        """Stream the wrapped runnable; each chunk is produced inside the run."""
        return drive(
            self._opener(config),
            self._options,
            lambda: self.bound.stream(input, config, **kwargs),
        )

    def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        """Async twin of `stream`."""
        return adrive(
            self._opener(config),
            self._options,
            lambda: self.bound.astream(input, config, **kwargs),
        )

    def transform(
        self, input: Iterator[Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[Any]:
        """The wrapped runnable's `transform`, inside the run."""
        return drive(
            self._opener(config),
            self._options,
            lambda: self.bound.transform(input, config, **kwargs),
        )

    def atransform(
        self, input: AsyncIterator[Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        """Async twin of `transform`."""
        return adrive(
            self._opener(config),
            self._options,
            lambda: self.bound.atransform(input, config, **kwargs),
        )

    def astream_log(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        """The wrapped runnable's `astream_log`, inside the run."""
        return adrive(
            self._opener(config),
            self._options,
            lambda: self.bound.astream_log(input, config, **kwargs),
        )

    def astream_events(
        self,
        input: Any,
        config: RunnableConfig | None = None,
        *,
        version: str = "v2",
        **kwargs: Any,
    ) -> Any:
        """The wrapped runnable's `astream_events` (v1, v2, v3), inside the run."""
        if version == "v3":
            return self._v3_target().astream_events(input, config, version="v3", **kwargs)
        bound: Any = self.bound
        return adrive(
            self._opener(config),
            self._options,
            lambda: bound.astream_events(input, config, version=version, **kwargs),
        )

    def stream_events(
        self,
        input: Any,
        config: RunnableConfig | None = None,
        *,
        version: str = "v2",
        **kwargs: Any,
    ) -> Any:
        """The wrapped runnable's `stream_events`; v3 streams run inside the run."""
        if version == "v3":
            return self._v3_target().stream_events(input, config, version="v3", **kwargs)
        bound: Any = self.bound
        return bound.stream_events(input, config, version=version, **kwargs)

    def _v3_target(self) -> Any:
        """The wrapped runnable, its own v3 stream driven through this wrapper's streams.

        A v3 event stream (`GraphRunStream`) is a lazy object that pulls the graph's
        `stream`/`astream` as the caller reads it: a shallow copy of the graph whose
        `stream`/`astream` are this wrapper's keeps every pull inside the run. A binding
        (`with_config`, `bind`) is rebuilt around a wrapped copy of what it binds. Pydantic
        runnables (a bare chat model) are called as they are.
        """
        inner = self.bound
        if isinstance(inner, RunnableBindingBase):
            return inner.model_copy(update={"bound": self._sibling(inner.bound)})
        if isinstance(inner, BaseModel):
            return inner
        routed = copy.copy(inner)
        vars(routed).update(stream=self.stream, astream=self.astream)
        return routed

    # -- batches: one run per item; the wrapped runnable's own batch sees the batch -----------
    @property
    def _untyped(self) -> Any:
        """The wrapped runnable, for calls whose `return_exceptions` is not a literal."""
        return self.bound

    def _plan(self, inputs: Sequence[Any], config: Any) -> _batches.Items:
        items = _batches.plan(inputs, config)
        self._last.run_ids = items.run_ids
        self._last.run_id = items.run_ids[-1]
        return items

    def _contexts(self, items: _batches.Items) -> list[RunContext]:
        return [
            self.middleware.run(
                r, strict=self.strict, on_incomplete=self.on_incomplete, ttl=self.ttl
            )
            for r in items.run_ids
        ]

    def _per_item(
        self, method: str, inputs: Sequence[Any], config: Any, kwargs: dict[str, Any]
    ) -> _batches.Each | None:
        """How the wrapped runnable's `method` runs the batch, when it is an `invoke` per item.

        That is `Runnable`'s default: the result names the runnable under the plain bindings
        and the configs and kwargs its `invoke` would receive. None when a runnable on the
        way batches by itself (a sequence, a retry, fallbacks): it gets the whole batch.
        """
        n = len(inputs)
        configs: list[Any] = list(config) if isinstance(config, Sequence) else [config] * n
        inner: Any = self.bound
        base = getattr(RunnableBindingBase, method)
        while isinstance(inner, RunnableBindingBase) and getattr(type(inner), method) is base:
            configs = [inner._merge_configs(c) for c in configs]
            kwargs = {**inner.kwargs, **kwargs}
            inner = inner.bound
        if getattr(type(inner), method) is not getattr(Runnable, method):
            return None
        full = get_config_list(configs, n)
        if not isinstance(config, Sequence):  # one config for all: its run_id names the
            # first item's run only, as in LangChain's get_config_list (not every item's)
            full[1:] = [cast(RunnableConfig, {k: v for k, v in c.items() if k != "run_id"})
                        for c in full[1:]]  # fmt: skip
        return _batches.Each(inner, full, kwargs)

    def batch(
        self,
        inputs: list[Any],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """The wrapped runnable's `batch`, each input in its own run.

        Items of one shared run id get `<id>:<i>`.
        """
        if not inputs or ACTIVE.get() is not None:
            return self.bound.batch(inputs, config, return_exceptions=return_exceptions, **kwargs)
        items = self._plan(inputs, config)
        each = self._per_item("batch", inputs, config, kwargs)
        if each is not None:
            items.enter(self._contexts(items), self._options)
            return each.batch(items, return_exceptions)
        configs = items.rooted()
        scopes = items.enter(self._contexts(items), self._options)
        return items.batch(
            scopes,
            lambda: self.bound.batch(
                items.inputs, configs, return_exceptions=return_exceptions, **kwargs
            ),
        )

    async def abatch(
        self,
        inputs: list[Any],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """Async twin of `batch`."""
        if not inputs or ACTIVE.get() is not None:
            return await self.bound.abatch(
                inputs, config, return_exceptions=return_exceptions, **kwargs
            )
        items = self._plan(inputs, config)
        each = self._per_item("abatch", inputs, config, kwargs)
        if each is not None:
            await items.aenter(self._contexts(items), self._options)
            return await each.abatch(items, return_exceptions)
        configs = items.rooted()
        scopes = await items.aenter(self._contexts(items), self._options)
        return await items.abatch(
            scopes,
            lambda: self.bound.abatch(
                items.inputs, configs, return_exceptions=return_exceptions, **kwargs
            ),
        )

    def batch_as_completed(
        self,
        inputs: Sequence[Any],
        config: RunnableConfig | Sequence[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> Iterator[tuple[int, Any]]:
        """`batch`, yielding `(index, output)` as items finish."""
        if not inputs or ACTIVE.get() is not None:
            pairs: Iterator[tuple[int, Any]] = self._untyped.batch_as_completed(
                inputs, config, return_exceptions=return_exceptions, **kwargs
            )
            return pairs
        return self._as_completed(inputs, config, return_exceptions, kwargs)

    def _as_completed(
        self, inputs: Sequence[Any], config: Any, return_exceptions: bool, kwargs: Any
    ) -> Iterator[tuple[int, Any]]:
        items = self._plan(inputs, config)  # at the first next(), as the runs open
        each = self._per_item("batch_as_completed", inputs, config, kwargs)
        if each is not None:
            items.enter(self._contexts(items), self._options)
            yield from each.as_completed(items, return_exceptions)
            return
        configs = items.rooted()
        scopes = items.enter(self._contexts(items), self._options)
        pairs = scopes.call(
            lambda: self._untyped.batch_as_completed(
                items.inputs, configs, return_exceptions=return_exceptions, **kwargs
            )
        )
        yield from items.as_completed(scopes, pairs)

    async def abatch_as_completed(
        self,
        inputs: Sequence[Any],
        config: RunnableConfig | Sequence[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> AsyncIterator[tuple[int, Any]]:
        """Async twin of `batch_as_completed`."""
        if not inputs or ACTIVE.get() is not None:
            async for pair in self._untyped.abatch_as_completed(
                inputs, config, return_exceptions=return_exceptions, **kwargs
            ):
                yield pair
            return
        items = self._plan(inputs, config)
        each = self._per_item("abatch_as_completed", inputs, config, kwargs)
        if each is not None:
            await items.aenter(self._contexts(items), self._options)
            async for pair in each.aas_completed(items, return_exceptions):
                yield pair
            return
        configs = items.rooted()
        scopes = await items.aenter(self._contexts(items), self._options)
        own = scopes.call(
            lambda: self._untyped.abatch_as_completed(
                items.inputs, configs, return_exceptions=return_exceptions, **kwargs
            )
        )
        async for pair in items.aas_completed(scopes, own):
            yield pair
