"""Plain Python steps (`Run.step`, the step decorators): a function call recorded as a call."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from .call import Call
from .inputs import KEY

__all__ = ["astep_call", "step_call"]

T = TypeVar("T")


class Run(Protocol):
    """What a plain step needs of `agentrewind.Run` (a Protocol: run.py imports this module)."""

    def begin(
        self,
        kind: str,
        name: str,
        key_input: Any,
        *,
        side_effects: bool = False,
        inputs: Any = KEY,
        record_inputs: bool | None = None,
    ) -> Call: ...


def _begin(
    run: Run,
    name: str,
    key: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    kind: str,
    side_effects: bool,
    record_inputs: bool | None,
) -> Call:
    given = {"args": list(args), "kwargs": kwargs}
    # keyed by its arguments (the default), the key input is the inputs: one tree for both
    key_input, inputs = (given, KEY) if key is None else (key, given)
    return run.begin(
        kind,
        name,
        key_input,
        side_effects=side_effects,
        inputs=inputs,
        record_inputs=record_inputs,
    )


def step_call(
    run: Run,
    name: str,
    fn: Callable[..., T],
    key: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    kind: str = "custom",
    side_effects: bool = True,
    record_inputs: bool | None = None,
) -> T:
    """Run `fn(*args, **kwargs)` as a call of `run` keyed by `key` (None: the arguments)."""
    call = _begin(run, name, key, args, kwargs, kind, side_effects, record_inputs)
    if call.hit:
        return call.value()  # type: ignore[no-any-return]
    return call.perform(fn, *args, **kwargs)


async def astep_call(
    run: Run,
    name: str,
    fn: Callable[..., Awaitable[T]],
    key: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    kind: str = "custom",
    side_effects: bool = True,
    record_inputs: bool | None = None,
) -> T:
    """Async twin of `step_call`."""
    call = _begin(run, name, key, args, kwargs, kind, side_effects, record_inputs)
    if call.hit:
        return call.value()  # type: ignore[no-any-return]
    return await call.aperform(fn, *args, **kwargs)
