"""Output formats for other tools: Mermaid and DOT trees, RFC 6902 JSON Patch diffs."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..tree import TreeNode

__all__ = ["dot", "json_patch", "mermaid"]


def _label(node: TreeNode, name: str) -> str:
    text = f"{name} {node.label}"
    if node.status not in ("active", "head"):
        text += f" [{node.status.replace('_', ' ')}]"
    if node.refs:
        text += f" <- {', '.join(node.refs)}"
    return text


def _edges(nodes: list[TreeNode]) -> list[tuple[str, str]]:
    ids = {n.id for n in nodes}
    edges = []
    for n in nodes:
        for parent in (n.parent_id, *n.merged):
            if parent in ids:
                edges.append((parent, n.id))
    return edges


def mermaid(nodes: list[TreeNode], names: Mapping[str, str]) -> str:
    """A Mermaid `flowchart` of the tree (merges get an edge from each parent)."""
    index = {n.id: f"n{i}" for i, n in enumerate(nodes)}
    lines = ["flowchart TD"]
    for n in nodes:
        text = _label(n, names.get(n.id, n.id)).replace('"', "#quot;")
        lines.append(f'    {index[n.id]}["{text}"]')
    lines += [f"    {index[a]} --> {index[b]}" for a, b in _edges(nodes)]
    return "\n".join(lines)


def dot(nodes: list[TreeNode], names: Mapping[str, str], title: str = "run") -> str:
    """A Graphviz `digraph` of the tree."""
    lines = [f"digraph {json.dumps(title)} {{", "    rankdir=TB;", "    node [shape=box];"]
    for n in nodes:
        style = ', style="dashed"' if n.status in ("rolled_back", "failed") else ""
        lines.append(
            f"    {json.dumps(n.id)} [label={json.dumps(_label(n, names.get(n.id, n.id)))}{style}];"
        )
    lines += [f"    {json.dumps(a)} -> {json.dumps(b)};" for a, b in _edges(nodes)]
    lines.append("}")
    return "\n".join(lines)


def _pointer(path: list[str]) -> str:
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in path)


def json_patch(a: Any, b: Any, path: list[str] | None = None) -> list[dict[str, Any]]:
    """RFC 6902 operations that turn `a` into `b`.

    Objects are compared key by key; other values, lists included, are replaced whole.
    """
    path = path or []
    if isinstance(a, dict) and isinstance(b, dict):
        ops: list[dict[str, Any]] = []
        for key in a:
            if key not in b:
                ops.append({"op": "remove", "path": _pointer([*path, str(key)])})
        for key, value in b.items():
            if key not in a:
                ops.append({"op": "add", "path": _pointer([*path, str(key)]), "value": value})
            else:
                ops += json_patch(a[key], value, [*path, str(key)])
        return ops
    if a == b and type(a) is type(b):
        return []
    return [{"op": "replace", "path": _pointer(path), "value": b}]
