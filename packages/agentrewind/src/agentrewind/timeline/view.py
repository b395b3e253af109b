"""`TimelineView`: what a `Timeline` knows in memory, and every read that needs no I/O.

The view holds the loaded checkpoints by id, the branch heads and the current branch. Reads
(state, history, status, diff, tree...) are answered from it without touching the store; the
writes in `agentrewind.timeline.ops` update it after their store write succeeded.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterator
from typing import Any

from ..diff import diff_states
from ..errors import CheckpointCycleError
from ..records import StepRecord
from ..serde import Serializer
from ..tree import TreeNode, find_cycle, render_tree
from . import graph as _graph
from .checkpoint import HEAD, Branch, Checkpoint, TimelineError

__all__ = ["TimelineView"]


class TimelineView:
    """The read-only side of a `Timeline`: checkpoints, branches and their history.

    Args:
        name: The timeline (its run id in the store).
        serializer: How states are decoded.
    """

    def __init__(self, name: str, serializer: Serializer) -> None:
        if not isinstance(name, str) or not name:
            raise TimelineError(f"a timeline needs a non-empty name, not {name!r}")
        self.name = name
        self.serializer = serializer
        self.namespace = ""
        """The store's namespace (part of the place its encrypted values are bound to)."""
        self.metrics: dict[str, int] = collections.Counter()
        """What this object did: checkpoints, rollbacks, branches, merges, errors, recoveries."""
        self._lock = threading.RLock()  # held by every write, and by reads that walk the graph
        self._load([], {})

    def _load(self, records: list[StepRecord], heads: dict[str, str]) -> None:
        """Replace the view with what the store holds (`records` in `seq` order)."""
        nodes: dict[str, Checkpoint] = {}
        seq = 0
        for record in records:
            seq = max(seq, record.seq)
            if record.kind == "checkpoint":
                nodes[record.step_id] = Checkpoint.from_record(
                    record, self.serializer, self.namespace
                )
        cycle = find_cycle({cid: node.parents for cid, node in nodes.items()})
        if cycle is not None:  # every walk of the history would go round it forever
            raise CheckpointCycleError(self.name, cycle)
        heads = dict(heads)
        self._nodes = nodes
        self._seq = seq
        self._current = heads.pop(HEAD, "main")
        self._heads: dict[str, str | None] = {b: h for b, h in heads.items() if h in nodes}
        self._created = bool(records) or bool(heads)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.name!r}, branch={self._current!r}, "
            f"checkpoints={len(self._nodes)}, branches={len(self._branch_names())})"
        )

    def __len__(self) -> int:
        return len(self._nodes)

    @property
    def current_branch(self) -> str:
        """The branch new checkpoints go to."""
        return self._current

    @property
    def head(self) -> Checkpoint | None:
        """The newest checkpoint of the current branch, or None."""
        head = self._heads.get(self._current)
        return None if head is None else self._nodes[head]

    def checkpoints(self) -> Iterator[Checkpoint]:
        """Every checkpoint of the timeline, oldest first, rolled-back ones included."""
        return iter(list(self._nodes.values()))

    def get_checkpoint(self, ref: str) -> Checkpoint:
        """Return a checkpoint by id, branch name (its head), or a unique id prefix or suffix.

        The tree shows ids by their last 10 digits (the random part); those resolve too.

        Raises:
            TimelineError: Nothing or more than one checkpoint matches.
        """
        node = self._nodes.get(ref)
        if node is not None:
            return node
        head = self._heads.get(ref)
        if head is not None:
            return self._nodes[head]
        matches = (
            [cid for cid in self._nodes if cid.startswith(ref) or cid.endswith(ref)]
            if len(ref) >= 4
            else []
        )
        if len(matches) == 1:
            return self._nodes[matches[0]]
        what = "is ambiguous" if matches else "matches no checkpoint or branch"
        raise TimelineError(f"{ref!r} {what} in timeline {self.name!r}")

    def get_state(self, checkpoint_id: str | None = None) -> Any:
        """The state at the current branch's head (or at `checkpoint_id`); None when empty.

        This reads what the object has loaded (no I/O); `refresh()` picks up other processes'
        changes.
        """
        if checkpoint_id is not None:
            return self.get_checkpoint(checkpoint_id).state
        head = self.head
        return None if head is None else head.state

    def logic_path(self, checkpoint_id: str | None = None) -> list[str]:
        """The `logic_step`s from the root to a checkpoint (default: the head)."""
        node = self.get_checkpoint(checkpoint_id) if checkpoint_id else self.head
        path = [n.logic_step for n in self._ancestry(node) if n.logic_step]
        return path[::-1]

    def _ancestry(self, node: Checkpoint | None, limit: int | None = None) -> Iterator[Checkpoint]:
        return _graph.ancestry(self._nodes, node, limit)

    def status(self, checkpoint_id: str) -> str:
        """`head`, `active` (in a branch's history), `rolled_back` or `failed`."""
        node = self.get_checkpoint(checkpoint_id)
        if node.failed:
            return "failed"
        with self._lock:
            if node.id in self._heads.values():
                return "head"
            live = _graph.reachable(self._nodes, self._heads)
        return "active" if node.id in live else "rolled_back"

    # -- branches ---------------------------------------------------------------------------
    def _branch_names(self) -> list[str]:
        names = [b for b in self._heads if self._heads[b]]
        if self._current not in names:
            names.append(self._current)
        return names

    def _branch(self, name: str) -> Branch:
        head = self._heads.get(name)
        count = sum(1 for _ in self._ancestry(self._nodes[head])) if head else 0
        return Branch(name, head, count, name == self._current)

    def list_branches(self) -> list[Branch]:
        """Every branch with its head, length and whether it is current, by name."""
        with self._lock:
            return [self._branch(name) for name in sorted(self._branch_names())]

    def merge_base(self, a: str, b: str) -> Checkpoint | None:
        """The nearest common ancestor of two checkpoints or branches (None if unrelated)."""
        return _graph.merge_base(self._nodes, self.get_checkpoint(a).id, self.get_checkpoint(b).id)

    # -- inspection -------------------------------------------------------------------------
    def history(self, branch: str | None = None, limit: int = 50) -> list[Checkpoint]:
        """The branch's checkpoints, newest first, following first parents (like `git log`).

        Raises:
            TimelineError: No such branch.
        """
        with self._lock:
            name = branch or self._current
            if name not in self._branch_names():
                raise TimelineError(f"no branch {name!r} in timeline {self.name!r}")
            head = self._heads.get(name)
            return list(self._ancestry(self._nodes[head], limit)) if head else []

    def diff(self, a: str, b: str) -> dict[str, Any]:
        """What changed in the state from `a` to `b` (checkpoint ids, prefixes or branches).

        Returns:
            `{"a": id, "b": id, "added": {...}, "removed": {...}, "changed": {...}}` keyed
            by nested paths such as `plan.steps[1]`.
        """
        first, second = self.get_checkpoint(a), self.get_checkpoint(b)
        return {"a": first.id, "b": second.id, **diff_states(first.state, second.state)}

    def tree_nodes(self) -> list[TreeNode]:
        """The checkpoints as `TreeNode`s with statuses and branch labels."""
        with self._lock:
            return _graph.tree_nodes(self._nodes, self._heads, self._current)

    def visualize_tree(self, *, color: bool = False) -> str:
        """The whole checkpoint tree as text: ids, descriptions, statuses, branch heads."""
        with self._lock:
            names = ", ".join(
                f"{b} (HEAD)" if b == self._current else b for b in sorted(self._branch_names())
            )
            header = f"timeline {self.name}: {len(self._nodes)} checkpoint(s); branches: {names}"
            return header + "\n" + render_tree(self.tree_nodes(), color=color)
