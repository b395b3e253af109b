"""Finding runs and steps for the CLI, and the one way to name a step.

Runs come from the store and from run sources (LangGraph threads...); a step is named by its
sequence number or a unique id prefix.
"""

from __future__ import annotations

from typing import Any

from ..documents.foreign import Hidden, hidden_runs
from ..documents.locating import (
    MIN_PREFIX,
    Located,
    find_step,
    labels,
    linked,
    locate,
    present,
    run_sources,
    run_steps,
    warn,
)
from ..records import RunInfo
from ..stores import Store
from .status import RunView, describe

__all__ = [
    "MIN_PREFIX",
    "Located",
    "all_runs",
    "find_step",
    "hidden",
    "labels",
    "linked",
    "locate",
    "run_sources",
    "run_steps",
    "source_call",
    "source_view",
]


def source_call(source: Any, method: str, *args: Any, **kw: Any) -> Any:
    """Call an optional RunSource method; None when the source lacks it."""
    fn = getattr(source, method, None)
    return None if fn is None else fn(*args, **kw)


def source_view(source: Any, info: RunInfo) -> RunView:
    """A run source's run as `runs` lists it (`source`: the source, or its name)."""
    name = source if isinstance(source, str) else source.name
    status = info.status if info.status != name else "completed"
    return RunView(info, name, name, status, info.metrics.steps)


def all_runs(store: Store, limit: int) -> list[RunView]:
    """Runs of the store and of every run source, most recently updated first."""
    found = describe(store, store.list_runs(limit=limit))
    for source in run_sources():
        try:
            if present(source, store):
                found += [source_view(source, r) for r in source.list_runs(store, limit=limit)]
        except Exception as exc:
            warn(source, exc)
    found.sort(key=lambda v: v.info.updated_at, reverse=True)
    return found[:limit]


def hidden(store: Store) -> list[Hidden]:
    """Runs in the store of frameworks whose run source is not installed here (never raises)."""
    try:
        return hidden_runs(store, [str(getattr(s, "name", "")) for s in run_sources()])
    except Exception:  # a note about other runs must never break the listing
        return []
