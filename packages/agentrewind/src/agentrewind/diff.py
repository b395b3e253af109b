"""Structural diff of two states: nested keys that were added, removed or changed."""

from __future__ import annotations

from typing import Any

__all__ = ["diff_states", "join_path"]

_MISSING = object()


def join_path(path: str, key: str | int) -> str:
    """`a.b[0]`-style field path: `[i]` for a list index, `.key` otherwise."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _walk(a: Any, b: Any, path: str, out: dict[str, dict[str, Any]]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in a.keys() | b.keys():
            _walk(a.get(key, _MISSING), b.get(key, _MISSING), join_path(path, str(key)), out)
        return
    if isinstance(a, list) and isinstance(b, list):
        for i in range(max(len(a), len(b))):
            _walk(
                a[i] if i < len(a) else _MISSING,
                b[i] if i < len(b) else _MISSING,
                join_path(path, i),
                out,
            )
        return
    if a is _MISSING:
        out["added"][path] = b
    elif b is _MISSING:
        out["removed"][path] = a
    elif a != b or type(a) is not type(b):
        out["changed"][path or "$"] = {"before": a, "after": b}


def diff_states(a: Any, b: Any) -> dict[str, dict[str, Any]]:
    """Compare two states key by key, descending into nested dicts and lists.

    Paths name nested keys with dots and list items with brackets (`plan.steps[2]`);
    the whole value is `$` when the two states are not both dicts.

    Args:
        a: The earlier state.
        b: The later state.

    Returns:
        `{"added": {path: value}, "removed": {path: value},
        "changed": {path: {"before": x, "after": y}}}`, each sorted by path.
    """
    out: dict[str, dict[str, Any]] = {"added": {}, "removed": {}, "changed": {}}
    _walk(a, b, "", out)
    return {kind: dict(sorted(found.items())) for kind, found in out.items()}
