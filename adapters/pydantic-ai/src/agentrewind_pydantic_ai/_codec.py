"""The journal's codec: pydantic-ai's JSON codec, refusing inside the unit what JSON would change.

A JSON-journal engine reduces each unit's result to JSON inside the unit and rebuilds it outside
(`JSON_CODEC`), so pydantic-ai's checks after the unit see the rebuilt value, not the one the
tool returned. For one tool result that differs: a list holding `ToolReturn` objects, which
pydantic-ai refuses (`ToolReturn` must be returned directly), comes back as a list of plain
dicts, and the refusal never fires (an object-passing engine such as DBOS hands back the list
itself). `RewindCodec` makes the same refusal, with pydantic-ai's words, inside the unit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.durable_exec import JSON_CODEC, CallToolResult, DurabilityCodec
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ToolReturn

__all__ = ["REWIND_CODEC", "RewindCodec", "unit_scope"]

_unit_key: ContextVar[tuple[object, ...]] = ContextVar("agentrewind_pydantic_ai_unit", default=())


@contextmanager
def unit_scope(cache_key: tuple[object, ...]) -> Iterator[None]:
    """Run a unit's body with its cache identity known to the codec (for error messages)."""
    token = _unit_key.set(cache_key)
    try:
        yield
    finally:
        _unit_key.reset(token)


def _tool_name() -> str | None:
    return next((v.tool_name for v in _unit_key.get() if isinstance(v, RunContext)), None)


def _holds_nested_tool_return(value: object) -> bool:
    """Whether a recorded tool result carries a list (or tuple) with a `ToolReturn` in it."""
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return False
    for field in dataclasses.fields(value):
        inner = getattr(value, field.name, None)
        if isinstance(inner, list | tuple) and any(isinstance(i, ToolReturn) for i in inner):
            return True
    return False


class RewindCodec(DurabilityCodec):
    """`JSON_CODEC`, plus pydantic-ai's refusal of nested `ToolReturn`s made before the JSON."""

    def dump(self, tp: Any, value: Any) -> Any:
        """Reduce `value` to JSON inside the unit.

        Raises:
            UserError: A tool returned a list holding `ToolReturn` objects (pydantic-ai's
                error, raised where pydantic-ai raises it for an object-passing engine).
        """
        if tp is CallToolResult and _holds_nested_tool_return(value):
            raise UserError(
                f"The return value of tool {_tool_name()!r} contains invalid nested `ToolReturn` "
                "objects. `ToolReturn` should be used directly."
            )
        return JSON_CODEC.dump(tp, value)

    def load(self, tp: Any, payload: Any) -> Any:
        """Rebuild the value from its JSON outside the unit (as `JSON_CODEC`)."""
        return JSON_CODEC.load(tp, payload)


REWIND_CODEC = RewindCodec()
