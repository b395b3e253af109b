"""The context variables that switch the interception on for one wrapped run."""

from __future__ import annotations

import dataclasses
from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentrewind import Call, Run

__all__ = ["ACTIVE", "FORCED", "REPLAYED_TAG", "Scope", "active_scope"]

REPLAYED_TAG = "agentrewind:replayed"
"""Tag (and `metadata["agentrewind"] == "replayed"`) carried by callbacks of replayed calls."""


@dataclasses.dataclass(frozen=True, slots=True)
class Scope:
    """What the patches need while a wrapped runnable runs."""

    run: Run
    tool_side_effects: bool = True


ACTIVE: ContextVar[Scope | None] = ContextVar("agentrewind_langchain_scope", default=None)
"""Set only inside a wrapped run; every patch returns to the original at once when unset."""

FORCED: ContextVar[Call | None] = ContextVar("agentrewind_langchain_forced", default=None)
"""A replayed stream hands its decided call to the `invoke` it drives for the callbacks."""


def active_scope() -> Scope | None:
    """The scope of the wrapped run active in this context, or None."""
    return ACTIVE.get()
