"""Type tags of stored trees: decoding built-in scalars, checking shapes, finding faults.

A tagged value is `{"__ar__": TAG, "v": PAYLOAD}`. `Serializer` decodes with these helpers;
`tree_issues` checks a whole tree without rebuilding any class (what `import` runs before it
writes anything), iteratively, so a hostile depth cannot exhaust the stack.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import uuid
import zoneinfo
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_DEPTH", "TAG", "decode_scalar", "locate", "tree_issues"]

TAG = "__ar__"
"""The key of a tagged value."""

SCALAR_TAGS = frozenset({"bytes", "datetime", "date", "time", "timedelta", "uuid", "decimal"})


def decode_scalar(tag: str, tree: dict[str, Any]) -> Any:
    """Decode a built-in scalar tag (`bytes` also for `pickle` and `enc` payloads)."""
    payload = tree.get("v")
    match tag:
        case "bytes":
            return base64.b64decode(_str(payload), validate=True)
        case "datetime":
            when = dt.datetime.fromisoformat(_str(payload))
            if "tz" in tree:
                zone = zoneinfo.ZoneInfo(_str(tree["tz"]))
                return when.replace(tzinfo=zone, fold=int(tree.get("fold", 0)))
            return when
        case "date":
            return dt.date.fromisoformat(_str(payload))
        case "time":
            return dt.time.fromisoformat(_str(payload))
        case "timedelta":
            return dt.timedelta(seconds=_number(payload))
        case "uuid":
            return uuid.UUID(_str(payload))
        case "decimal":
            return decimal.Decimal(_str(payload))
    raise ValueError(f"{tag!r} is not a scalar tag")


def expect_list(payload: Any) -> list[Any]:
    if not isinstance(payload, list):
        raise TypeError(f"expected a list, not {type(payload).__name__}")
    return payload


def expect_dict(payload: Any) -> dict[str, Any]:
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


def locate(decode: Callable[[Any], Any], tree: Any, path: str = "$") -> str:
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


_CLASS_TAGS = frozenset({"enum", "dataclass", "pydantic"})
MAX_DEPTH = 256
"""Deepest nesting `tree_issues` accepts (decoding recurses once per level)."""


def tree_issues(tree: Any, path: str = "$") -> list[tuple[str, str]]:
    """Check a stored tree's type tags without rebuilding any class: `(path, problem)` pairs.

    Built-in tags are decoded (a bad date, invalid base64...); class tags (dataclass,
    pydantic, enum) and codec tags need a well-formed name and payload; nesting is bounded
    by `MAX_DEPTH`. Iterative, so a hostile depth cannot exhaust the stack. `import` runs it
    on a whole document before writing anything.
    """
    issues: list[tuple[str, str]] = []
    stack: list[tuple[Any, str, int]] = [(tree, path, 0)]
    while stack:
        node, where, depth = stack.pop()
        if depth > MAX_DEPTH:
            issues.append((where, f"nested deeper than {MAX_DEPTH} levels"))
            continue
        if isinstance(node, list):
            stack.extend((v, f"{where}[{i}]", depth + 1) for i, v in enumerate(node))
            continue
        if not isinstance(node, dict):
            continue
        if TAG not in node:
            stack.extend((v, f"{where}.{k}", depth + 1) for k, v in node.items())
            continue
        tag, payload = node[TAG], node.get("v")
        if not isinstance(tag, str):
            issues.append((where, f"type tag must be a string, not {tag!r}"))
        elif tag in SCALAR_TAGS or tag in ("pickle", "enc"):
            try:
                decode_scalar(tag if tag in SCALAR_TAGS else "bytes", node)
            except Exception as exc:
                issues.append((where, f"malformed {tag!r} value: {exc}"))
        elif tag == "dict":
            if not isinstance(payload, list) or not all(
                isinstance(p, list) and len(p) == 2 for p in payload
            ):
                issues.append((where, "'dict' payload must be a list of [key, value] pairs"))
            else:
                stack.extend((v, f"{where}[{i}]", depth + 1) for i, v in enumerate(payload))
        elif tag in ("tuple", "set", "frozenset"):
            if not isinstance(payload, list):
                issues.append((where, f"{tag!r} payload must be a list"))
            else:
                stack.extend((v, f"{where}[{i}]", depth + 1) for i, v in enumerate(payload))
        else:
            name = node.get("t")
            if tag in _CLASS_TAGS and not (isinstance(name, str) and ":" in name):
                issues.append((where, f"{tag!r} value needs a type name 'module:Class'"))
            elif tag == "dataclass" and not isinstance(payload, dict):
                issues.append((where, "'dataclass' payload must be an object"))
            else:
                stack.append((payload, where, depth + 1))
    return issues
