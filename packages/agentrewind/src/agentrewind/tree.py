"""Text rendering of a tree of steps (timeline checkpoints or journal steps).

Straight runs of single children stay in one column; only forks indent, so a 10,000-step
linear history renders as 10,000 lines, not 10,000 levels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping

__all__ = ["TreeNode", "find_cycle", "render_tree", "short_id"]

_ICONS = {"active": "●", "head": "◉", "rolled_back": "○", "failed": "✗", "merge": "◆"}
_ASCII_ICONS = {"active": "*", "head": "@", "rolled_back": "o", "failed": "x", "merge": "+"}
_COLORS = {"head": "32", "rolled_back": "2", "failed": "31", "merge": "36", "active": "0"}


@dataclasses.dataclass(slots=True)
class TreeNode:
    """One line of the tree."""

    id: str
    parent_id: str | None
    label: str
    status: str = "active"
    refs: list[str] = dataclasses.field(default_factory=list)
    merged: list[str] = dataclasses.field(default_factory=list)


def short_id(step_id: str) -> str:
    """The distinctive part of an id: the random tail of a 32-digit time-ordered id."""
    return step_id[-10:] if len(step_id) == 32 else step_id[:12]


def _line(node: TreeNode, color: bool, names: Mapping[str, str] | None, plain: bool) -> str:
    icons = _ASCII_ICONS if plain else _ICONS
    icon = icons["merge"] if node.merged else icons.get(node.status, icons["active"])

    def name(i: str) -> str:
        return names.get(i, short_id(i)) if names is not None else short_id(i)

    text = f"{icon} {name(node.id)}  {node.label}"
    if node.merged:
        text += f"  (merge of {', '.join(name(m) for m in node.merged)})"
    if node.status not in ("active", "head"):
        text += f"  [{node.status.replace('_', ' ')}]"
    if node.refs:
        text += f"  <- {', '.join(node.refs)}"
    if color:
        code = _COLORS["merge"] if node.merged else _COLORS.get(node.status, "0")
        text = f"\x1b[{code}m{text}\x1b[0m"
    return text


def render_tree(
    nodes: list[TreeNode],
    *,
    color: bool = False,
    names: Mapping[str, str] | None = None,
    plain: bool = False,
) -> str:
    """Render `nodes` (in creation order) as an indented tree, one node per line.

    Args:
        nodes: The nodes, parents before children.
        color: ANSI colours by status.
        names: How to print each id (default `short_id`).
        plain: Plain ASCII glyphs, for outputs that cannot encode the Unicode ones.
    """
    fork, last_fork, bar = ("|- ", "`- ", "|  ") if plain else ("├─ ", "└─ ", "│  ")
    if not nodes:
        return "(empty)"
    by_id = {n.id: n for n in nodes}
    children: dict[str | None, list[str]] = {}
    for n in nodes:
        parent = n.parent_id if n.parent_id in by_id else None
        children.setdefault(parent, []).append(n.id)
    lines: list[str] = []
    stack = [(root, "", "") for root in reversed(children.get(None, []))]
    while stack:
        nid, head, cont = stack.pop()
        while True:
            lines.append(head + _line(by_id[nid], color, names, plain))
            kids = children.get(nid, [])
            if len(kids) == 1:
                nid, head = kids[0], cont
                continue
            for i in range(len(kids) - 1, -1, -1):
                last = i == len(kids) - 1
                stack.append(
                    (kids[i], cont + (last_fork if last else fork), cont + ("   " if last else bar))
                )
            break
    return "\n".join(lines)


def find_cycle(parents: Mapping[str, Iterable[str]]) -> list[str] | None:
    """A cycle of the parent links (`id -> its parents`), as ids in order; None if acyclic.

    Parents that are not keys are ignored (a root's missing parent). Iterative: a history of
    any length is checked without recursion, in time linear in its links.
    """
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in parents:
        if state.get(start):
            continue
        path: list[str] = [start]
        todo: list[Iterator[str]] = [iter(parents[start])]
        state[start] = 1
        while todo:
            nxt = next(todo[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                todo.pop()
            elif nxt in parents and state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            elif nxt in parents and not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                todo.append(iter(parents[nxt]))
    return None
