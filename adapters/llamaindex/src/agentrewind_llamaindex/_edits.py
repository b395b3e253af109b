"""State edits as the journal keeps them: what each write did, applied in the order made.

Steps share one live `ctx.store`, and a step's writes become durable only with its result
(see `_state`). So the committed state is the live state minus the writes of steps still in
flight, and writes commit in the order step results arrive, not the order they were made. A
JSON Patch holds resulting values (`count: 3`), which is wrong on both counts: a value written
on top of an in-flight step's write carries that write along, and an older value that commits
last overwrites a newer one.

An `EditLog` therefore records each write as the edit it made, numbered in the order made:

- a number that changed (or appeared: it counts up from 0) becomes an increment (`delta`),
  so `count += 1` in four parallel steps gives 4 whatever the order, and a write on top of an
  in-flight step's write does not carry it;
- items added at the end of a list become appends (`/-`), for the same reason;
- any other write is a value, applied only if no later write to the same path (or a container
  above it) has been applied already.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workflows.context.state_store import apply_state_patch

__all__ = ["APPEND", "EditLog", "describe", "resolve"]

Patch = list[dict[str, Any]]
APPEND = "-"
"""The JSON Pointer token for "after the last item" (RFC 6901)."""
_MISSING = object()


def _segments(path: str) -> list[str]:
    return [s.replace("~1", "/").replace("~0", "~") for s in path.split("/")[1:]]


def resolve(tree: Any, path: str) -> Any:
    """The value at a JSON Pointer in a JSON tree, or a sentinel when it is absent."""
    node = tree
    for seg in _segments(path):
        if isinstance(node, dict) and seg in node:
            node = node[seg]
        elif isinstance(node, list) and seg.isdigit() and int(seg) < len(node):
            node = node[int(seg)]
        else:
            return _MISSING
    return node


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def describe(patch: Patch, old_at: Callable[[str], Any]) -> Patch:
    """Turn a JSON Patch of one write into edits; `old_at(path)` reads the value before it."""
    out: Patch = []
    for op in patch:
        path, kind = op["path"], op["op"]
        parent, last = path.rsplit("/", 1)
        if kind == "add" and last.isdigit():
            container = old_at(parent)
            if isinstance(container, list) and int(last) >= len(container):
                out.append({**op, "path": f"{parent}/{APPEND}"})
                continue
        if kind in ("add", "replace") and _number(op.get("value")):
            old = old_at(path)
            if _number(old) or (old is _MISSING and not isinstance(old_at(parent), list)):
                start = old if _number(old) else 0  # a new number counts up from 0
                out.append({**op, "delta": op["value"] - start, "from": start})
                continue
        out.append(op)
    return out


def concrete(data: Any, op: dict[str, Any]) -> dict[str, Any] | None:
    """The plain JSON Patch operation an edit makes on `data` (None: nothing to apply)."""
    path = op["path"]
    if "delta" in op:
        current = resolve(data, path)
        if _number(current):
            # Exactly the written value when nothing else intervened (no float rounding).
            value = op["value"] if current == op.get("from") else current + op["delta"]
            return {"op": "replace", "path": path, "value": value}
        parent = resolve(data, path.rsplit("/", 1)[0])
        if current is _MISSING and isinstance(parent, dict):
            # Created by a write not (or not yet) durable: the increment starts from 0.
            value = op["value"] if op.get("from") == 0 else op["delta"]
            return {"op": "add", "path": path, "value": value}
        return {"op": op["op"], "path": path, "value": op["value"]}
    if path.endswith(f"/{APPEND}"):
        parent_path = path[: -len(APPEND) - 1]
        parent = resolve(data, parent_path)
        if not isinstance(parent, list):
            return None
        return {"op": "add", "path": f"{parent_path}/{len(parent)}", "value": op["value"]}
    return {k: v for k, v in op.items() if k not in ("delta", "from")}


def apply_edits(data: dict[str, Any], patch: Patch) -> dict[str, Any]:
    """Apply edits to a tree, skipping those whose container does not exist there."""
    for op in patch:
        plain = concrete(data, op)
        if plain is None:
            continue
        try:
            data = apply_state_patch(data, [plain])
        except (KeyError, IndexError, TypeError, ValueError):
            continue  # its container was made by a write that is not durable
    return data


class EditLog:
    """Pending edits per step invocation, numbered in the order they were made."""

    def __init__(self) -> None:
        self._seq = 0
        self._pending: dict[str | None, list[tuple[int, Patch]]] = {}
        self._applied: dict[tuple[str, ...], int] = {}
        """Per path, the number of the latest value write applied there."""

    def park(self, invocation: str | None, patch: Patch) -> None:
        """Hold one write of `invocation` until its result is journaled."""
        self._seq += 1
        self._pending.setdefault(invocation, []).append((self._seq, patch))

    def take(self, invocation: str | None) -> list[tuple[int, Patch]]:
        """Remove and return the writes of `invocation`, in the order they were made."""
        return self._pending.pop(invocation, [])

    def apply(self, data: dict[str, Any], seq: int, patch: Patch) -> dict[str, Any]:
        """Apply one committed write made as number `seq`."""
        for op in patch:
            key = tuple(_segments(op["path"]))
            relative = "delta" in op or (key and key[-1] == APPEND)
            if not relative:
                if any(self._applied.get(key[:i], 0) > seq for i in range(len(key) + 1)):
                    continue  # a later write to this path (or above it) is durable already
                self._applied[key] = seq
            data = apply_edits(data, [op])
        return data
