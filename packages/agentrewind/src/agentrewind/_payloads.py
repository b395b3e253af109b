"""Shape checks for stored tag payloads, and finding where a stored tree fails to decode."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

TAG = "__ar__"
"""The key of a tagged value: `{"__ar__": TAG, "v": PAYLOAD}`."""


def _list(payload: Any) -> list[Any]:
    if not isinstance(payload, list):
        raise TypeError(f"expected a list, not {type(payload).__name__}")
    return payload


def _dict(payload: Any) -> dict[str, Any]:
    if not isinstance(payload, dict):
        raise TypeError(f"expected an object, not {type(payload).__name__}")
    return payload


def _str(payload: Any) -> str:
    if not isinstance(payload, str):
        raise TypeError(f"expected a string, not {type(payload).__name__}")
    return payload


def _number(payload: Any) -> float:
    if isinstance(payload, bool) or not isinstance(payload, int | float):
        raise TypeError(f"expected a number, not {type(payload).__name__}")
    return payload


def _locate(decode: Callable[[Any], Any], tree: Any, path: str = "$") -> str:
    """The path of the innermost part of `tree` that fails to decode (for error messages)."""
    for _ in range(10_000):
        children: list[tuple[str, Any]] = []
        if isinstance(tree, list):
            children = [(f"[{i}]", v) for i, v in enumerate(tree)]
        elif isinstance(tree, dict):
            items = tree.get("v") if TAG in tree else tree
            if TAG in tree and isinstance(items, list):
                children = [(f"[{i}]", v) for i, v in enumerate(items)]
            elif isinstance(items, dict):
                children = [(f".{k}", v) for k, v in items.items()]
        for step, child in children:
            try:
                decode(child)
            except Exception:
                tree, path = child, path + step
                break
        else:
            return path
    return path
