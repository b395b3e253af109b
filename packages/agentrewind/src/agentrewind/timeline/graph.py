"""Walks over a timeline's checkpoint graph: ancestry, reachability, merge base, tree nodes."""

from __future__ import annotations

import collections
from collections.abc import Iterator, Mapping

from ..tree import TreeNode
from .checkpoint import Checkpoint

__all__ = ["ancestry", "merge_base", "reachable", "tree_nodes"]

Nodes = Mapping[str, Checkpoint]


def ancestry(
    nodes: Nodes, node: Checkpoint | None, limit: int | None = None
) -> Iterator[Checkpoint]:
    """`node` and its first-parent ancestors, newest first."""
    count = 0
    while node is not None and (limit is None or count < limit):
        yield node
        count += 1
        node = nodes.get(node.parent_id) if node.parent_id else None


def _all_ancestors(nodes: Nodes, starts: list[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(starts)
    while todo:
        cid = todo.pop()
        if cid in seen or cid not in nodes:
            continue
        seen.add(cid)
        todo.extend(nodes[cid].parents)
    return seen


def reachable(nodes: Nodes, heads: Mapping[str, str | None]) -> set[str]:
    """Checkpoints in the history (all parents) of some branch head."""
    return _all_ancestors(nodes, [h for h in heads.values() if h])


def merge_base(nodes: Nodes, a: str, b: str) -> Checkpoint | None:
    """The nearest common ancestor of checkpoints `a` and `b`, or None."""
    ours = _all_ancestors(nodes, [a])
    queue = collections.deque([b])
    seen: set[str] = set()
    while queue:
        cid = queue.popleft()
        if cid in ours:
            return nodes[cid]
        if cid in seen or cid not in nodes:
            continue
        seen.add(cid)
        queue.extend(nodes[cid].parents)
    return None


def tree_nodes(nodes: Nodes, heads: Mapping[str, str | None], current: str) -> list[TreeNode]:
    """The checkpoints as `TreeNode`s with statuses and branch labels, oldest first."""
    live = reachable(nodes, heads)
    refs: dict[str, list[str]] = {}
    for branch in sorted(heads):
        head = heads[branch]
        if head:
            refs.setdefault(head, []).append(f"{branch} (HEAD)" if branch == current else branch)
    out = []
    for n in nodes.values():
        status = "failed" if n.failed else "active" if n.id in live else "rolled_back"
        if n.id in refs and status == "active":
            status = "head"
        label = n.description or n.logic_step or "checkpoint"
        if n.metadata.get("confidence") is not None:
            label += f"  (confidence {n.metadata['confidence']})"
        out.append(
            TreeNode(n.id, n.parent_id, label, status, refs.get(n.id, []), list(n.parents[1:]))
        )
    return out
