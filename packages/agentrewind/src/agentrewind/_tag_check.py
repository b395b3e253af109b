"""Checking the type tags of a stored tree without rebuilding anything (for `import`)."""

from __future__ import annotations

from typing import Any

from ._payloads import TAG
from .serde import Serializer

__all__ = ["MAX_DEPTH", "tree_issues"]


_SCALAR_TAGS = frozenset(
    {"bytes", "datetime", "date", "time", "timedelta", "uuid", "decimal", "pickle"}
)
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
    checker = Serializer(allow_pickle=False)
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
        elif tag in _SCALAR_TAGS:
            if tag == "pickle":
                payload = {TAG: "bytes", "v": payload}
            try:
                checker._from(payload if tag == "pickle" else node)
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
