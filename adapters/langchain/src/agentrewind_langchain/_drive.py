"""Driving a runnable's call, stream or event stream inside one journal run.

The run is entered in a copied `contextvars.Context` that holds the scope the patches read
(`_scope.ACTIVE`) and the core's current run; every step of the wrapped runnable (each
`next()` of a stream included) runs in that context, so the user's config is never touched.
A `None` run context means a wrapped run is already active in the caller's context (a wrapped
runnable inside another): the call then runs as is, journaled by the outer run.

Async calls and async streams run in the caller's own task, as unwrapped ones do (so
cancelling the caller cancels the runnable where it waits): the run is entered in a private
context, and the variables that entering set are applied to the caller's context around each
await of the runnable, then reset.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextvars import ContextVar
from typing import Any, TypeVar

from agentrewind import RunContext

from ._scope import ACTIVE, Options

__all__ = ["acall", "adrive", "call", "drive"]

T = TypeVar("T")


def _enter(context: RunContext, options: Options) -> None:
    ACTIVE.set(options.scope(context.__enter__()))


async def _aenter(context: RunContext, options: Options) -> None:
    ACTIVE.set(options.scope(await context.__aenter__()))


def _call_in(context: RunContext, options: Options, fn: Callable[[], T]) -> T:
    _enter(context, options)
    try:
        result = fn()
    except BaseException:
        context.__exit__(*sys.exc_info())
        raise
    context.__exit__(None, None, None)
    return result


def call(context: RunContext | None, options: Options, fn: Callable[[], T]) -> T:
    """Run `fn()` inside the run `context` opens (or as is when `context` is None)."""
    if context is None:
        return fn()
    return contextvars.copy_context().run(_call_in, context, options, fn)


class _Entered:
    """The context variables that entering a run set, to apply around each async step."""

    def __init__(self, base: contextvars.Context, ctx: contextvars.Context) -> None:
        self.ctx = ctx
        self.changed: list[tuple[ContextVar[Any], Any]] = [
            (var, value) for var, value in ctx.items() if var not in base or base[var] is not value
        ]

    def apply(self) -> list[tuple[ContextVar[Any], Any]]:
        return [(var, var.set(value)) for var, value in self.changed]

    @staticmethod
    def reset(tokens: list[tuple[ContextVar[Any], Any]]) -> None:
        for var, token in reversed(tokens):
            var.reset(token)


async def _aopen(context: RunContext, options: Options) -> _Entered:
    base = contextvars.copy_context()
    ctx = base.copy()
    await asyncio.create_task(_aenter(context, options), context=ctx)
    return _Entered(base, ctx)


async def _aclose(context: RunContext, entered: _Entered, exc_info: Any) -> None:
    await asyncio.create_task(context.__aexit__(*exc_info), context=entered.ctx)


async def acall(context: RunContext | None, options: Options, fn: Callable[[], Awaitable[T]]) -> T:
    """Async twin of `call`, awaiting `fn()` in the caller's task."""
    if context is None:
        return await fn()
    entered = await _aopen(context, options)
    tokens = entered.apply()
    try:
        result = await fn()
    except BaseException:
        exc_info = sys.exc_info()
        entered.reset(tokens)
        await _aclose(context, entered, exc_info)
        raise
    entered.reset(tokens)
    await _aclose(context, entered, (None, None, None))
    return result


def _close_iter(iterator: Any) -> None:
    close = getattr(iterator, "close", None)
    if close is not None:
        close()


def drive(
    open_run: Callable[[], RunContext | None],
    options: Options,
    start: Callable[[], Iterator[T]],
) -> Iterator[T]:
    """Yield what `start()` yields, each item produced inside the run `open_run()` opens.

    The run opens at the first `next()`, and `start()` is called inside it: a runnable
    whose `stream` decides at call time (a chat model's) sees the run. A consumer that stops
    early (`close()`) leaves the run `paused`, not failed.
    """
    context = open_run()
    if context is None:
        yield from start()
        return
    ctx = contextvars.copy_context()
    ctx.run(_enter, context, options)
    try:
        iterator = ctx.run(start)
        while True:
            try:
                item = ctx.run(next, iterator)
            except StopIteration:
                break
            yield item
    except GeneratorExit:  # the consumer stopped early: the run is paused, not failed
        ctx.run(_close_iter, iterator)
        context.run.status = "paused"
        ctx.run(context.__exit__, None, None, None)
        raise
    except BaseException:
        ctx.run(context.__exit__, *sys.exc_info())
        raise
    ctx.run(context.__exit__, None, None, None)


async def _astep(entered: _Entered, iterator: Any) -> Any:
    tokens = entered.apply()
    try:
        return await iterator.__anext__()
    finally:
        entered.reset(tokens)


async def _aclose_iter(entered: _Entered, iterator: Any) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        tokens = entered.apply()
        try:
            await close()
        finally:
            entered.reset(tokens)


async def adrive(
    open_run: Callable[[], RunContext | None],
    options: Options,
    start: Callable[[], AsyncIterator[T]],
) -> AsyncIterator[T]:
    """Async twin of `drive`; each item is awaited in the consumer's task."""
    context = open_run()
    if context is None:
        async for item in start():
            yield item
        return
    entered = await _aopen(context, options)
    try:
        tokens = entered.apply()
        try:
            iterator = start()
        finally:
            entered.reset(tokens)
        while True:
            try:
                item = await _astep(entered, iterator)
            except StopAsyncIteration:
                break
            yield item
    except GeneratorExit:
        await _aclose_iter(entered, iterator)
        context.run.status = "paused"
        await _aclose(context, entered, (None, None, None))
        raise
    except BaseException:
        exc_info = sys.exc_info()
        await _aclose(context, entered, exc_info)
        raise
    await _aclose(context, entered, (None, None, None))
