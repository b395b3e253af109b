"""Text rendering of a tree of steps (timeline checkpoints or journal steps).

Straight runs of single children stay in one column; only forks indent, so a 10,000-step
linear history renders as 10,000 lines, not 10,000 levels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping

__all__ = ["MIN_PREFIX", "TreeNode", "find_cycle", "render_tree", "short_ids"]

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


MIN_PREFIX = 8
"""Shortest id prefix printed for a step (`log`, `tree`, the demo, `visualize_tree`, the viewer)."""


def short_ids(ids: Iterable[str]) -> dict[str, str]:
    """Each id's shortest unique prefix among `ids`: the one spelling every surface prints.

    At least `MIN_PREFIX` characters, and never all digits, so that it cannot be read as a
    sequence number; every command that takes a step accepts it.
    """
    ordered = sorted(set(ids))
    out: dict[str, str] = {}
    for i, sid in enumerate(ordered):
        common = 0
        for other in (ordered[i - 1] if i else "", ordered[i + 1] if i + 1 < len(ordered) else ""):
            n = 0
            while n < min(len(sid), len(other)) and sid[n] == other[n]:
                n += 1
            common = max(common, n)
        size = max(MIN_PREFIX, common + 1)
        while size < len(sid) and sid[:size].isdigit():
            size += 1
        out[sid] = sid[:size]
    return out


def _line(node: TreeNode, color: bool, names: Mapping[str, str], plain: bool) -> str:
    icons = _ASCII_ICONS if plain else _ICONS
    icon = icons["merge"] if node.merged else icons.get(node.status, icons["active"])

    def name(i: str) -> str:
        return names.get(i, i)

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
        names: How to print each id (default: `short_ids` of the nodes').
        plain: Plain ASCII glyphs, for outputs that cannot encode the Unicode ones.
    """
    fork, last_fork, bar = ("|- ", "`- ", "|  ") if plain else ("├─ ", "└─ ", "│  ")
    if not nodes:
        return "(empty)"
    by_id = {n.id: n for n in nodes}
    if names is None:
        names = short_ids(by_id)
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
