"""Driving a runnable's call, stream or event stream inside one journal run.

The run is entered in a copied `contextvars.Context` that holds the scope the patches read
(`_scope.ACTIVE`) and the core's current run; every step of the wrapped runnable (each
`next()` of a stream included) runs in that context, so the user's config is never touched.
A `None` run context means a wrapped run is already active in the caller's context (a wrapped
runnable inside another): the call then runs as is, journaled by the outer run.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

from agentrewind import RunContext

from ._scope import ACTIVE, Scope

__all__ = ["acall", "adrive", "call", "drive"]

T = TypeVar("T")


def _enter(context: RunContext, tool_side_effects: bool) -> None:
    ACTIVE.set(Scope(context.__enter__(), tool_side_effects))


async def _aenter(context: RunContext, tool_side_effects: bool) -> None:
    ACTIVE.set(Scope(await context.__aenter__(), tool_side_effects))


def _call_in(context: RunContext, tool_side_effects: bool, fn: Callable[[], T]) -> T:
    _enter(context, tool_side_effects)
    try:
        result = fn()
    except BaseException:
        context.__exit__(*sys.exc_info())
        raise
    context.__exit__(None, None, None)
    return result


def call(context: RunContext | None, tool_side_effects: bool, fn: Callable[[], T]) -> T:
    """Run `fn()` inside the run `context` opens (or as is when `context` is None)."""
    if context is None:
        return fn()
    return contextvars.copy_context().run(_call_in, context, tool_side_effects, fn)


async def _acall_in(
    context: RunContext, tool_side_effects: bool, fn: Callable[[], Awaitable[T]]
) -> T:
    await _aenter(context, tool_side_effects)
    try:
        result = await fn()
    except BaseException:
        await context.__aexit__(*sys.exc_info())
        raise
    await context.__aexit__(None, None, None)
    return result


async def acall(
    context: RunContext | None, tool_side_effects: bool, fn: Callable[[], Awaitable[T]]
) -> T:
    """Async twin of `call`."""
    if context is None:
        return await fn()
    coro = _acall_in(context, tool_side_effects, fn)
    return await asyncio.create_task(coro, context=contextvars.copy_context())


def _close_iter(iterator: Any) -> None:
    close = getattr(iterator, "close", None)
    if close is not None:
        close()


def drive(
    open_run: Callable[[], RunContext | None],
    tool_side_effects: bool,
    make: Callable[[], Iterator[T]],
) -> Iterator[T]:
    """Yield what `make()` yields, each item produced inside the run `open_run()` opens.

    The run opens at the first `next()`. A consumer that stops early (`close()`) leaves the
    run `paused`, not failed.
    """
    context = open_run()
    if context is None:
        yield from make()
        return
    ctx = contextvars.copy_context()
    ctx.run(_enter, context, tool_side_effects)
    try:
        iterator = ctx.run(make)
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


async def _anext(iterator: Any) -> Any:
    return await iterator.__anext__()


async def _aclose(iterator: Any) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()


async def adrive(
    open_run: Callable[[], RunContext | None],
    tool_side_effects: bool,
    make: Callable[[], AsyncIterator[T]],
) -> AsyncIterator[T]:
    """Async twin of `drive`."""
    context = open_run()
    if context is None:
        async for item in make():
            yield item
        return
    ctx = contextvars.copy_context()
    await asyncio.create_task(_aenter(context, tool_side_effects), context=ctx)
    try:
        iterator = ctx.run(make)
        while True:
            try:
                item = await asyncio.create_task(_anext(iterator), context=ctx)
            except StopAsyncIteration:
                break
            yield item
    except GeneratorExit:
        await asyncio.create_task(_aclose(iterator), context=ctx)
        context.run.status = "paused"
        await asyncio.create_task(context.__aexit__(None, None, None), context=ctx)
        raise
    except BaseException:
        exc_info = sys.exc_info()
        await asyncio.create_task(context.__aexit__(*exc_info), context=ctx)
        raise
    await asyncio.create_task(context.__aexit__(None, None, None), context=ctx)
