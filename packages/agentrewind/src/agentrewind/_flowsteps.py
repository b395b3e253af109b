"""Stepping a flow (a generator of I/O requests), written once for every driver.

The stores' PostgreSQL and Redis I/O (`stores.postgres`, `stores.redis`) and the timeline's
operations (`timeline.flow`) are generators that yield what they need done and receive the
result, or have the error thrown in at the `yield`. Their sync and async drivers only perform
the requests; `FlowSteps` feeds the replies back and ends with the flow's return value.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Generic, TypeVar

__all__ = ["FlowSteps"]

T = TypeVar("T")
R = TypeVar("R")


class FlowSteps(Generic[R, T]):
    """Iterates the requests of a flow, feeding it each one's reply (`value`) or error (`error`).

    A flow that raises ends the iteration with that error; one that returns leaves `result`
    set. A driver loops `for request in steps:` and sets `steps.value` (or `steps.error`).
    """

    __slots__ = ("error", "flow", "result", "value")

    def __init__(self, flow: Generator[R, Any, T]) -> None:
        self.flow = flow
        self.value: Any = None
        self.error: BaseException | None = None
        self.result: T

    def __iter__(self) -> FlowSteps[R, T]:
        return self

    def __next__(self) -> R:
        value, error = self.value, self.error
        self.value = self.error = None
        try:
            return self.flow.send(value) if error is None else self.flow.throw(error)
        except StopIteration as stop:
            self.result = stop.value
            raise StopIteration from None
