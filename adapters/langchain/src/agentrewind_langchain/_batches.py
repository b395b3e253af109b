"""Batches of a wrapped runnable: one run per item, the wrapped runnable called with the batch.

The wrapped runnable's own `batch`/`abatch`/`batch_as_completed`/`abatch_as_completed`
receives the whole batch, as unwrapped (a sequence's steps see the batch, a retry retries the
items it retries, a provider's batch call stays one call), with each item's config passed on.
Each item still journals in its own run: every item's config names the root run of its
callback tree (`run_id`, LangChain's own key for it, kept when the caller set one), a
callback handler added through LangChain's configure hook notes each run's parent while the
batch runs, and a chat or tool call finds its item by walking up from its own run to a root
(`ItemScopes.scope_for`). A call no walk leads to an item (a runnable that starts no run for
an item) runs unjournaled, with a warning.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import uuid
import warnings
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, wait
from contextvars import ContextVar
from typing import Any, TypeVar, cast
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import get_executor_for_config
from langchain_core.runnables.utils import gated_coro
from langchain_core.tracers.context import register_configure_hook

from agentrewind import RunContext
from agentrewind.adapters import new_id

from ._scope import ACTIVE, Options, Scope, resolve_run_id

__all__ = ["Each", "ItemScopes", "Items", "plan"]

logger = logging.getLogger("agentrewind.langchain")

T = TypeVar("T")


class _Parents(BaseCallbackHandler):
    """Notes the parent of every run started while a wrapped batch runs."""

    run_inline = True  # noted before the run's body starts, also on async managers

    def __init__(self) -> None:
        self.parents: dict[UUID, UUID | None] = {}

    def _note(self, run_id: UUID, parent_run_id: UUID | None) -> None:
        self.parents[run_id] = parent_run_id

    def on_chain_start(
        self,
        serialized: Any,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._note(run_id, parent_run_id)

    def on_chat_model_start(
        self,
        serialized: Any,
        messages: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._note(run_id, parent_run_id)

    def on_llm_start(
        self,
        serialized: Any,
        prompts: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._note(run_id, parent_run_id)

    def on_tool_start(
        self,
        serialized: Any,
        input_str: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._note(run_id, parent_run_id)

    def on_retriever_start(
        self,
        serialized: Any,
        query: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._note(run_id, parent_run_id)


_PARENTS: ContextVar[_Parents | None] = ContextVar("agentrewind_langchain_parents", default=None)
register_configure_hook(_PARENTS, True)  # inert while unset: one ContextVar read per configure


class ItemScopes:
    """The scopes of a batch's items, found from a run of the item's callback tree."""

    def __init__(self, roots: dict[UUID, Scope]) -> None:
        self.roots = roots
        self.tracker = _Parents()

    def scope_for(self, *runs: UUID | None) -> Scope | None:
        """The scope of the item the first of `runs` that leads to a root belongs to."""
        parents = self.tracker.parents
        for run_id in runs:
            seen: set[UUID] = set()
            while run_id is not None and run_id not in seen:
                scope = self.roots.get(run_id)
                if scope is not None:
                    return scope
                seen.add(run_id)
                run_id = parents.get(run_id)
        logger.warning(
            "agentrewind: a call inside a wrapped batch belongs to no item's run (the "
            "runnable started no callback run for the item): it runs unjournaled"
        )
        return None

    def _set(self) -> list[tuple[ContextVar[Any], Any]]:
        return [(ACTIVE, ACTIVE.set(self)), (_PARENTS, _PARENTS.set(self.tracker))]

    @staticmethod
    def _reset(tokens: list[tuple[ContextVar[Any], Any]]) -> None:
        for var, token in reversed(tokens):
            var.reset(token)

    def call(self, fn: Callable[[], T]) -> T:
        """`fn()` with this batch active (in a copy of the caller's context)."""

        def inside() -> T:
            self._set()
            return fn()

        return contextvars.copy_context().run(inside)

    async def acall(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Async twin of `call`, awaited in the caller's task."""
        tokens = self._set()
        try:
            return await fn()
        finally:
            self._reset(tokens)

    def iterate(self, iterator: Iterator[T]) -> Iterator[T]:
        """Each `next()` of `iterator` with this batch active."""
        ctx = contextvars.copy_context()
        ctx.run(self._set)
        while True:
            try:
                item = ctx.run(next, iterator)
            except StopIteration:
                return
            yield item

    async def aiterate(self, iterator: AsyncIterator[T]) -> AsyncIterator[T]:
        """Async twin of `iterate`, each item awaited in the consumer's task."""
        while True:
            tokens = self._set()
            try:
                item = await iterator.__anext__()
            except StopAsyncIteration:
                return
            finally:
                self._reset(tokens)
            yield item


def _exc_info(outcome: Any) -> tuple[Any, Any, Any]:
    if isinstance(outcome, BaseException):
        return type(outcome), outcome, outcome.__traceback__
    return None, None, None


class Items:
    """The items of one batch: inputs, configs, and the run and root run id of each."""

    def __init__(
        self,
        inputs: Sequence[Any],
        configs: list[RunnableConfig],
        run_ids: list[str],
        shared: bool = False,
    ) -> None:
        self.inputs = list(inputs)
        self.configs = configs
        self.run_ids = run_ids
        self.shared = shared
        self.contexts: list[contextvars.Context] = []
        self._open: dict[int, tuple[RunContext, contextvars.Context]] = {}

    def rooted(self) -> list[RunnableConfig]:
        """The configs with `run_id` naming each item's root callback run.

        For a runnable whose own batch starts those runs (LangChain pops `run_id` as it
        starts one, before any of the user's code sees the config).

        As LangChain does, a shared config's `run_id` names the first item's root only.
        """
        seen: set[Any] = set()
        for i, item in enumerate(self.configs):
            root = item.get("run_id")
            if root is None or root in seen or (self.shared and i > 0):
                root = uuid.uuid4()
            seen.add(root)
            item["run_id"] = root
        return self.configs

    # -- opening and closing the items' runs ------------------------------------------------
    def enter(self, contexts: list[RunContext], options: Options) -> ItemScopes:
        """Open every item's run (each in a context of its own)."""
        scopes: list[Scope] = []
        try:
            for i, context in enumerate(contexts):
                ctx = contextvars.copy_context()
                run = ctx.run(context.__enter__)
                self._open[i] = (context, ctx)
                scopes.append(options.scope(run))
                ctx.run(ACTIVE.set, scopes[-1])
                self.contexts.append(ctx)
        except BaseException as exc:
            self.exit_all(exc)
            raise
        return self._scopes(scopes)

    async def aenter(self, contexts: list[RunContext], options: Options) -> ItemScopes:
        """Async twin of `enter`."""
        scopes: list[Scope] = []
        try:
            for i, context in enumerate(contexts):
                ctx = contextvars.copy_context()
                run = await asyncio.create_task(context.__aenter__(), context=ctx)
                self._open[i] = (context, ctx)
                scopes.append(options.scope(run))
                ctx.run(ACTIVE.set, scopes[-1])
                self.contexts.append(ctx)
        except BaseException as exc:
            await self.aexit_all(exc)
            raise
        return self._scopes(scopes)

    def _scopes(self, scopes: list[Scope]) -> ItemScopes:
        roots: dict[UUID, Scope] = {}
        for config, scope in zip(self.configs, scopes, strict=True):
            root = config.get("run_id")
            if root is not None:
                roots[root] = scope
        return ItemScopes(roots)

    def exit(self, i: int, outcome: Any) -> None:
        """Close item `i`'s run: failed when `outcome` is an exception, else completed."""
        opened = self._open.pop(i, None)
        if opened is not None:
            context, ctx = opened
            ctx.run(context.__exit__, *_exc_info(outcome))

    async def aexit(self, i: int, outcome: Any) -> None:
        """Async twin of `exit`."""
        opened = self._open.pop(i, None)
        if opened is not None:
            context, ctx = opened
            await asyncio.create_task(context.__aexit__(*_exc_info(outcome)), context=ctx)

    def exit_all(self, outcome: Any, *, paused: bool = False) -> None:
        """Close every run still open (`paused`: the consumer stopped reading)."""
        for i in sorted(self._open):
            if paused:
                self._open[i][0].run.status = "paused"
            self.exit(i, outcome)

    async def aexit_all(self, outcome: Any, *, paused: bool = False) -> None:
        """Async twin of `exit_all`."""
        for i in sorted(self._open):
            if paused:
                self._open[i][0].run.status = "paused"
            await self.aexit(i, outcome)

    # -- the batch itself --------------------------------------------------------------------
    def batch(self, scopes: ItemScopes | None, fn: Callable[[], list[Any]]) -> list[Any]:
        """`fn()` (the wrapped runnable's batch, or `Each`) with the items' runs open around it."""
        try:
            outputs = fn() if scopes is None else scopes.call(fn)
        except BaseException as exc:
            self.exit_all(exc)
            raise
        for i, output in enumerate(outputs):
            self.exit(i, output)
        return outputs

    async def abatch(
        self, scopes: ItemScopes | None, fn: Callable[[], Awaitable[list[Any]]]
    ) -> list[Any]:
        """Async twin of `batch`."""
        try:
            outputs = await (fn() if scopes is None else scopes.acall(fn))
        except BaseException as exc:
            await self.aexit_all(exc)
            raise
        for i, output in enumerate(outputs):
            await self.aexit(i, output)
        return outputs

    def as_completed(
        self, scopes: ItemScopes | None, iterator: Iterator[tuple[int, Any]]
    ) -> Iterator[tuple[int, Any]]:
        """The wrapped runnable's `(index, output)` pairs; each closes its item's run."""
        try:
            for i, output in iterator if scopes is None else scopes.iterate(iterator):
                self.exit(i, output)
                yield i, output
        except GeneratorExit:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()
            self.exit_all(None, paused=True)
            raise
        except BaseException as exc:
            self.exit_all(exc)
            raise
        self.exit_all(None)

    async def aas_completed(
        self, scopes: ItemScopes | None, iterator: AsyncIterator[tuple[int, Any]]
    ) -> AsyncIterator[tuple[int, Any]]:
        """Async twin of `as_completed`."""
        try:
            async for i, output in iterator if scopes is None else scopes.aiterate(iterator):
                await self.aexit(i, output)
                yield i, output
        except GeneratorExit:
            close = getattr(iterator, "aclose", None)
            if close is not None:
                await close()
            await self.aexit_all(None, paused=True)
            raise
        except BaseException as exc:
            await self.aexit_all(exc)
            raise
        await self.aexit_all(None)


class Each:
    """A batch run as LangChain's default `Runnable.batch` runs it: an `invoke` per item.

    Same executor (same `max_concurrency`) and configs; each item runs in its own run.
    """

    def __init__(self, runnable: Any, full: list[RunnableConfig], kwargs: dict[str, Any]):
        self.runnable = runnable
        self.full = full  # as `Runnable.batch` hands them to `invoke`
        self.kwargs = kwargs
        self.items: Items = cast(Items, None)
        self.return_exceptions = False

    def _start(self, items: Items, return_exceptions: bool) -> None:
        self.items = items
        self.return_exceptions = return_exceptions

    def _invoke(self, input: Any, config: RunnableConfig) -> Any:
        return self.runnable.invoke(input, config, **self.kwargs)

    async def _ainvoke(self, input: Any, config: RunnableConfig) -> Any:
        return await self.runnable.ainvoke(input, config, **self.kwargs)

    def _one(self, invoke: Callable[[Any, RunnableConfig], Any], i: int) -> Any:
        try:
            return self.items.contexts[i].run(invoke, self.items.inputs[i], self.full[i])
        except Exception as exc:
            if self.return_exceptions:
                return exc
            raise

    async def _aone(self, ainvoke: Callable[[Any, RunnableConfig], Awaitable[Any]], i: int) -> Any:
        try:
            return await ainvoke(self.items.inputs[i], self.full[i])
        except Exception as exc:
            if self.return_exceptions:
                return exc
            raise

    def _tasks(self, coros: list[Any]) -> list[asyncio.Task[Any]]:
        limit = self.full[0].get("max_concurrency")
        semaphore = asyncio.Semaphore(limit) if limit else None
        return [
            asyncio.create_task(gated_coro(semaphore, c) if semaphore else c, context=ctx)
            for c, ctx in zip(coros, self.items.contexts, strict=True)
        ]

    def batch(self, items: Items, return_exceptions: bool) -> list[Any]:
        """The outputs, in input order."""
        self._start(items, return_exceptions)
        invoke = self._invoke
        n = len(self.full)

        def run() -> list[Any]:
            if n == 1:
                return [self._one(invoke, 0)]
            with get_executor_for_config(self.full[0]) as executor:
                return list(executor.map(lambda i: self._one(invoke, i), range(n)))

        return self.items.batch(None, run)

    async def abatch(self, items: Items, return_exceptions: bool) -> list[Any]:
        """Async twin of `batch`."""
        self._start(items, return_exceptions)
        ainvoke = self._ainvoke

        async def run() -> list[Any]:
            tasks = self._tasks([self._aone(ainvoke, i) for i in range(len(self.full))])
            return list(await asyncio.gather(*tasks))

        return await self.items.abatch(None, run)

    def as_completed(self, items: Items, return_exceptions: bool) -> Iterator[tuple[int, Any]]:
        """`(index, output)` pairs as items finish."""
        self._start(items, return_exceptions)
        invoke = self._invoke
        n = len(self.full)

        def pairs() -> Iterator[tuple[int, Any]]:
            if n == 1:
                yield 0, self._one(invoke, 0)
                return
            with get_executor_for_config(self.full[0]) as executor:
                futures = {executor.submit(self._one, invoke, i): i for i in range(n)}
                try:
                    while futures:
                        done, _ = wait(futures, return_when=FIRST_COMPLETED)
                        for future in done:
                            yield futures.pop(future), future.result()
                finally:
                    for future in futures:
                        future.cancel()

        return self.items.as_completed(None, pairs())

    def aas_completed(
        self, items: Items, return_exceptions: bool
    ) -> AsyncIterator[tuple[int, Any]]:
        """Async twin of `as_completed`."""
        self._start(items, return_exceptions)
        ainvoke = self._ainvoke

        async def indexed(i: int) -> tuple[int, Any]:
            return i, await self._aone(ainvoke, i)

        async def pairs() -> AsyncIterator[tuple[int, Any]]:
            tasks = self._tasks([indexed(i) for i in range(len(self.full))])
            try:
                for next_done in asyncio.as_completed(tasks):
                    yield await next_done
            finally:
                for task in tasks:
                    task.cancel()

        return self.items.aas_completed(None, pairs())


def _item_configs(
    config: RunnableConfig | Sequence[RunnableConfig] | None, n: int
) -> tuple[list[RunnableConfig], bool]:
    """Each item's config as the caller gave it (a shallow copy), and whether one was shared."""
    if isinstance(config, Sequence):
        if len(config) != n:
            raise ValueError(
                f"config must be a list of the same length as inputs, "
                f"but got {len(config)} configs for {n} inputs"
            )
        return [RunnableConfig(**c) for c in config], False
    if n > 1 and config and config.get("run_id") is not None:
        # LangChain's own warning (get_config_list): the wrapped runnable gets one config
        # per item from us, so it would not warn itself.
        warnings.warn(
            "Provided run_id be used only for the first element of the batch.",
            category=RuntimeWarning,
            stacklevel=4,
        )
    return [RunnableConfig(**(config or {})) for _ in range(n)], True


def plan(inputs: Sequence[Any], config: RunnableConfig | Sequence[RunnableConfig] | None) -> Items:
    """Decide each item's run: its own id, `<id>:<i>` when one id is shared, else a new id."""
    configs, shared = _item_configs(config, len(inputs))
    ids = [resolve_run_id(c) for c in configs]
    repeated = Counter(ids)
    run_ids: list[str] = []
    for i, run_id in enumerate(ids):
        if run_id is None:
            run_id = new_id()
        elif shared or repeated[run_id] > 1:
            run_id = f"{run_id}:{i}"
        run_ids.append(run_id)
    return Items(inputs, configs, run_ids, shared)
