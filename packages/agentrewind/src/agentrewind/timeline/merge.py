"""Merge strategies of `Timeline.merge`: how two branch states become one."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from .base import TimelineBase
from .checkpoint import Checkpoint, TimelineError
from .flow import Flow, Locked
from .ops import commit_locked, emit

__all__ = ["MERGE_STRATEGIES", "MergeStrategy", "deep_merge", "merge", "merge_states"]

MergeStrategy = str | Callable[..., Any]
"""A strategy name or `fn(ours, theirs[, base]) -> merged state`."""

MERGE_STRATEGIES = ("ours", "theirs", "combine", "prefer_higher_confidence")
_ALIASES = {"prefer_target": "ours", "prefer_source": "theirs"}


def deep_merge(ours: Any, theirs: Any) -> Any:
    """Overlay `theirs` on `ours`: dicts merge key by key (recursively), else `theirs` wins."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        merged = dict(ours)
        for key, value in theirs.items():
            merged[key] = deep_merge(ours[key], value) if key in ours else value
        return merged
    return theirs


def _confidence(metadata: dict[str, Any]) -> float:
    value = metadata.get("confidence", 0.0)
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def strategy_name(strategy: MergeStrategy) -> str:
    """The name recorded in the merge checkpoint's meta."""
    if isinstance(strategy, str):
        return _ALIASES.get(strategy, strategy)
    return getattr(strategy, "__name__", type(strategy).__name__)


def merge_states(
    strategy: MergeStrategy,
    ours: Any,
    theirs: Any,
    base: Any,
    ours_meta: dict[str, Any],
    theirs_meta: dict[str, Any],
) -> tuple[Any, str]:
    """Apply `strategy`; returns the merged state and which side won (`ours`/`theirs`/`both`).

    Raises:
        ValueError: Unknown strategy name.
    """
    if callable(strategy):
        params = inspect.signature(strategy).parameters.values()
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        varargs = any(p.kind is p.VAR_POSITIONAL for p in params)
        if varargs or len(positional) >= 3:
            return strategy(ours, theirs, base), "both"
        return strategy(ours, theirs), "both"
    name = _ALIASES.get(strategy, strategy)
    if name == "ours":
        return ours, "ours"
    if name == "theirs":
        return theirs, "theirs"
    if name == "combine":
        return deep_merge({} if ours is None else ours, theirs), "both"
    if name == "prefer_higher_confidence":
        if _confidence(theirs_meta) >= _confidence(ours_meta):
            return theirs, "theirs"
        return ours, "ours"
    raise ValueError(
        f"unknown merge strategy {strategy!r}: use one of {', '.join(MERGE_STRATEGIES)} "
        "or a callable fn(ours, theirs[, base]) returning the merged state"
    )


def _merge_locked(tl: TimelineBase, source: str, strategy: MergeStrategy) -> Flow[Checkpoint]:
    if source == tl.current_branch:
        raise TimelineError(f"cannot merge branch {source!r} into itself")
    theirs_id = tl._heads.get(source)
    if theirs_id is None:
        raise TimelineError(f"no branch {source!r} with checkpoints in {tl.name!r}")
    theirs, ours = tl._nodes[theirs_id], tl.head
    base = tl.merge_base(ours.id, theirs.id) if ours else None
    try:
        merged, winner = merge_states(
            strategy,
            ours.state if ours else None,
            theirs.state,
            base.state if base else None,
            ours.metadata if ours else {},
            theirs.metadata,
        )
    except ValueError as exc:
        raise TimelineError(str(exc)) from exc
    metadata: dict[str, Any] = {
        "merged_from": source,
        "merge_strategy": strategy_name(strategy),
        "source_checkpoint": theirs.id,
        "winner": winner,
    }
    options: dict[str, list[Checkpoint | None]] = {
        "ours": [ours],
        "theirs": [theirs],
        "both": [ours, theirs],
    }
    scores = [n.metadata["confidence"] for n in options[winner] if n and "confidence" in n.metadata]
    if scores:
        metadata["confidence"] = max(scores)
    node = yield from commit_locked(
        tl,
        merged,
        metadata,
        f"Merged {source!r} into {tl.current_branch!r}",
        f"merge:{source}",
        merge_parent=theirs.id,
        kind="merge",
    )
    tl.metrics["total_merges"] += 1
    return node


def merge(tl: TimelineBase, source: str, strategy: MergeStrategy) -> Flow[Checkpoint]:
    """`Timeline.merge`: write the merge checkpoint of branch `source` on the current branch."""
    node: Checkpoint = yield Locked(_merge_locked(tl, source, strategy))
    yield from emit(tl, "merge", node.branch)
    return node
