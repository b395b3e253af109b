"""Step decorators: record and replay a function's calls through the run in progress.

`Middleware.step` and the top-level `agentrewind.step` share one implementation: the
decorated function looks up the active run when it is called (a `ContextVar`, so threads and
tasks each see their own) and, inside a run, becomes a recorded step of it; outside any run
it is called normally and nothing is stored.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, overload

from .cache import CacheOptions, acached_call, cache_options, cached_call
from .call import JournalSettings
from .context import CURRENT_RUN
from .run import Run

__all__ = ["make_step_decorator", "step"]

F = TypeVar("F", bound=Callable[..., Any])


def make_step_decorator(
    find_run: Callable[[], Run | None],
    name: str | None,
    *,
    kind: str,
    side_effects: bool,
    key: Callable[..., Any] | None,
    cache: CacheOptions | None = None,
    settings: JournalSettings | None = None,
    record_inputs: bool | None = None,
) -> Callable[[F], F]:
    """Build a decorator whose calls are recorded in the run `find_run()` returns (if any).

    With `cache`, calls are also served from the store's cross-run cache: inside a run that
    run's store, outside any run the store of `settings` (none: a plain call).
    """

    def decorate(fn: F) -> F:
        step_name = name or fn.__qualname__

        def key_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            return None if key is None else key(*args, **kwargs)

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                run = find_run()
                where = settings if run is None else run.middleware
                if cache is not None and where is not None:
                    return await acached_call(
                        run,
                        where,
                        step_name,
                        fn,
                        _key_input(key_of(args, kwargs), args, kwargs),
                        cache,
                        args,
                        kwargs,
                        kind=kind,
                        side_effects=side_effects,
                    )
                if run is None:
                    return await fn(*args, **kwargs)
                return await run._astep(
                    step_name,
                    fn,
                    key_of(args, kwargs),
                    args,
                    kwargs,
                    kind=kind,
                    side_effects=side_effects,
                    record_inputs=record_inputs,
                )

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            run = find_run()
            where = settings if run is None else run.middleware
            if cache is not None and where is not None:
                return cached_call(
                    run,
                    where,
                    step_name,
                    fn,
                    _key_input(key_of(args, kwargs), args, kwargs),
                    cache,
                    args,
                    kwargs,
                    kind=kind,
                    side_effects=side_effects,
                )
            if run is None:
                return fn(*args, **kwargs)
            return run._step(
                step_name,
                fn,
                key_of(args, kwargs),
                args,
                kwargs,
                kind=kind,
                side_effects=side_effects,
                record_inputs=record_inputs,
            )

        return wrapper  # type: ignore[return-value]

    return decorate


def _key_input(key: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return {"args": list(args), "kwargs": kwargs} if key is None else key


@overload
def step(name: F, /) -> F: ...
@overload
def step(
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
    **timeline_options: Any,
) -> F | Callable[[F], F]:
    """Decorate a function (sync or async) so its calls are steps of the run in progress.

    Inside `middleware.run(...)` (or a wrapped chain, agent or workflow) each call is recorded,
    and replayed from the journal when the run is resumed; outside any run the function is
    simply called and nothing is stored. This is `Middleware.step` without naming the
    middleware: the run is found through the current context.

    Args:
        name: The step name (default: the function's qualified name).
        kind: The step kind stored with the record.
        side_effects: Write a `started` record before running (see `on_incomplete`).
        key: `key(*args, **kwargs)` returns what identifies a call (default: all arguments).
        cache_ttl: Seconds a result is also served across runs from the run's store
            (`journal.cache`); outside any run the function is a plain call.
        max_entries: Entries the cache keeps for this step (least recently used go first).
        cache_key: `cache_key(*args, **kwargs)` identifies a call for the cache.
        record_inputs: False: the call's arguments are not recorded as its inputs (default:
            the middleware's `record_inputs`).
        **timeline_options: Not accepted: they belonged to the timeline decorator that was
            called `step` before 0.2 and is now `agentrewind.checkpointed`.

    Raises:
        TypeError: Timeline options (`timeline=`, `store=`, `max_retries=`, `auto_rollback=`)
            were passed; the message names `@agentrewind.checkpointed`.

    Example:
        >>> import agentrewind
        >>> @agentrewind.step("charge")
        ... def charge(amount: int) -> str:
        ...     return f"charged {amount}"
        >>> charge(5)  # no run in progress: a plain call
        'charged 5'
    """
    if timeline_options:
        names = ", ".join(f"{k}=" for k in timeline_options)
        raise TypeError(
            f"agentrewind.step() got {names}: the timeline decorator is now "
            "@agentrewind.checkpointed(...); @agentrewind.step records and replays a step of "
            "the run in progress (like @middleware.step)"
        )
    cache = cache_options(cache_ttl, max_entries, cache_key)
    options: dict[str, Any] = {"kind": kind, "side_effects": side_effects, "key": key}
    options.update(cache=cache, record_inputs=record_inputs)
    if callable(name):
        return make_step_decorator(CURRENT_RUN.get, None, **options)(name)
    return make_step_decorator(CURRENT_RUN.get, name, **options)
