"""The context variables that switch the interception on for one wrapped run."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

if TYPE_CHECKING:
    from agentrewind import Call, Run
    from agentrewind.adapters import CacheSites

__all__ = [
    "ACTIVE",
    "FORCED",
    "REPLAYED_TAG",
    "RUN_ID_KEY",
    "ItemScopesLike",
    "Options",
    "Scope",
    "active_scope",
    "resolve_run_id",
    "scope_for",
]

REPLAYED_TAG = "agentrewind:replayed"
"""Tag (and `metadata["agentrewind"] == "replayed"`) carried by callbacks of replayed calls."""


@dataclasses.dataclass(frozen=True, slots=True)
class Scope:
    """What the patches need while a wrapped runnable runs."""

    run: Run
    tool_side_effects: bool = True
    cache: CacheSites | None = None
    """The wrapper's `wrap(cache=...)` rules, passed to `Run.begin` with each call."""


@dataclasses.dataclass(frozen=True, slots=True)
class Options:
    """A wrapper's part of its calls' `Scope`, known before its run opens."""

    tool_side_effects: bool = True
    cache: CacheSites | None = None

    def scope(self, run: Run) -> Scope:
        """The scope of the calls made in `run`."""
        return Scope(run, self.tool_side_effects, self.cache)


class ItemScopesLike(Protocol):
    """The runs of a wrapped batch's items (`_batches.ItemScopes`)."""

    def scope_for(self, *runs: UUID | None) -> Scope | None:
        """The scope of the item whose callback tree holds the first of `runs` that has one."""
        ...


ACTIVE: ContextVar[Scope | ItemScopesLike | None] = ContextVar(
    "agentrewind_langchain_scope", default=None
)
"""Set only inside a wrapped run (or batch); every patch returns to the original at once when
unset."""


def scope_for(*runs: Callable[[], UUID | None]) -> Scope | None:
    """The scope a call journals in: the wrapped run's, or in a batch its item's.

    Args:
        runs: Callables giving callback run ids of the call, nearest first (asked only
            inside a batch): its own run, the run it was started under.
    """
    scope = ACTIVE.get()
    if scope is None or isinstance(scope, Scope):
        return scope
    return scope.scope_for(*(run() for run in runs))


FORCED: ContextVar[Call | None] = ContextVar("agentrewind_langchain_forced", default=None)
"""A replayed stream hands its decided call to the `invoke` it drives for the callbacks."""


def active_scope() -> Scope | None:
    """The scope of the wrapped run active in this context, or None (also in a batch)."""
    scope = ACTIVE.get()
    return scope if isinstance(scope, Scope) else None


RUN_ID_KEY = "agentrewind_run_id"
"""`configurable` key a caller may set to name the run; `thread_id` is used when it is absent."""


def resolve_run_id(config: Mapping[str, Any] | None) -> str | None:
    """The run id a config names: `agentrewind_run_id`, else `thread_id`, else None."""
    configurable = (config or {}).get("configurable") or {}
    run_id = configurable.get(RUN_ID_KEY) or configurable.get("thread_id")
    return None if run_id is None else str(run_id)
