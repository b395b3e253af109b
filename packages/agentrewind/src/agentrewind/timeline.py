"""`Timeline`: git-like checkpoints of an agent's state, persisted in a store.

A timeline is a run (`run_id` = its name) whose steps are checkpoints (`kind="checkpoint"`)
linked by `parent_id`; branches are the run's heads (`store.set_head`), and the reserved head
`HEAD` names the current branch. Rollback moves a head back and never deletes a checkpoint;
merge writes a checkpoint with both parents (`meta["parents"]`). The Timeline object caches heads
and checkpoints, so `checkpoint()` writes one record and one head and never reads history.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from . import _events, _graph
from ._checkpoint import HEAD, Branch, Checkpoint, TimelineError, check_branch_name, record_meta
from ._diff import diff_states
from ._ids import new_id
from ._merge import MergeStrategy
from ._tree import TreeNode, render_tree
from .records import RunMetrics, StepRecord
from .serde import Serializer
from .stores import Store, connect

__all__ = ["HEAD", "Branch", "Checkpoint", "Timeline", "TimelineError"]


class Timeline:
    """Checkpoints, rollback, branches and merges of an agent's state, kept in a store.

    Args:
        name: The timeline (its run id in the store). The same name opens the same timeline
            from any process.
        store: A `Store`, a store URL, or None for the default store.
        serializer: How states are encoded (default: JSON with type tags, no pickle).
        events: Publish changes for `subscribe` (one `PUBLISH` per change on Redis).

    Example:
        >>> tl = Timeline("research-agent", store="memory://")
        >>> cp = tl.checkpoint({"step": "parsed"}, metadata={"confidence": 0.9})
        >>> tl.get_state()
        {'step': 'parsed'}
    """

    def __init__(
        self,
        name: str,
        store: Store | str | None = None,
        *,
        serializer: Serializer | None = None,
        events: bool = True,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise TimelineError(f"a timeline needs a non-empty name, not {name!r}")
        self.name = name
        self._owns_store = not isinstance(store, Store)
        self.store: Store = store if isinstance(store, Store) else connect(store)
        self.serializer = serializer or Serializer()
        self._events = events
        self._lock = threading.RLock()
        self.metrics: dict[str, int] = collections.Counter()
        """What this object did: checkpoints, rollbacks, branches, merges, errors, recoveries."""
        self.refresh()

    def __repr__(self) -> str:
        return (
            f"Timeline({self.name!r}, branch={self._current!r}, "
            f"checkpoints={len(self._nodes)}, branches={len(self._branch_names())})"
        )

    def __enter__(self) -> Timeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the store if this timeline opened it from a URL."""
        if self._owns_store:
            self.store.close()

    # -- loading ----------------------------------------------------------------------------
    def refresh(self) -> None:
        """Reload checkpoints and heads from the store (changes made by other processes)."""
        records = self.store.load_steps(self.name)
        heads = self.store.get_heads(self.name)
        with self._lock:
            self._nodes: dict[str, Checkpoint] = {}
            self._seq = 0
            for record in records:
                self._seq = max(self._seq, record.seq)
                if record.kind == "checkpoint":
                    self._nodes[record.step_id] = Checkpoint.from_record(record, self.serializer)
            self._current = heads.pop(HEAD, "main")
            self._heads: dict[str, str | None] = {
                b: h for b, h in heads.items() if h in self._nodes
            }
            self._created = bool(records) or bool(heads)

    # -- lookups ----------------------------------------------------------------------------
    @property
    def current_branch(self) -> str:
        """The branch new checkpoints go to."""
        return self._current

    @property
    def head(self) -> Checkpoint | None:
        """The newest checkpoint of the current branch, or None."""
        head = self._heads.get(self._current)
        return None if head is None else self._nodes[head]

    def __len__(self) -> int:
        return len(self._nodes)

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
        """The state at the current branch's head (or at `checkpoint_id`); None when empty."""
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
        if node.id in self._heads.values():
            return "head"
        return "active" if node.id in _graph.reachable(self._nodes, self._heads) else "rolled_back"

    # -- writing ----------------------------------------------------------------------------
    def _ensure_run(self) -> None:
        if not self._created:
            if self.store.get_run(self.name) is None:
                self.store.begin_run(self.name)
                self.store.end_run(self.name, "active", RunMetrics())
            self._created = True

    def _set_head(self, branch: str, checkpoint_id: str | None) -> None:
        self.store.set_head(self.name, branch, checkpoint_id)
        self._heads[branch] = checkpoint_id

    def _emit(self, kind: str, branch: str) -> None:
        if not self._events:
            return
        if self.store.scheme != "redis" and not _events.has_local_subscribers(
            self.store, self.name
        ):
            return
        head = self._heads.get(branch)
        node = self._nodes.get(head) if head else None
        event = _events.TimelineEvent(
            self.name, kind, branch, head, node.hash if node else None, time.time()
        )
        _events.publish(self.store, event)

    def checkpoint(
        self,
        state: Any,
        metadata: dict[str, Any] | None = None,
        description: str = "",
        logic_step: str = "",
    ) -> Checkpoint:
        """Save `state` as the new head of the current branch (like `git commit`).

        Args:
            state: What the agent holds now (anything the serializer encodes).
            metadata: Extra context; `confidence` is used by merges and documents.
            description: Human-readable description.
            logic_step: Name of the reasoning step.

        Returns:
            The checkpoint, with its `id` and content `hash`.

        Raises:
            SerializationError: `state` or `metadata` holds a value that cannot be stored.
        """
        return self._commit(state, metadata, description, logic_step)

    def _commit(
        self,
        state: Any,
        metadata: dict[str, Any] | None,
        description: str,
        logic_step: str,
        *,
        failed: bool = False,
        merge_parent: str | None = None,
        kind: str = "checkpoint",
    ) -> Checkpoint:
        tree = self.serializer.to_tree(state)
        user_meta = dict(metadata) if metadata else {}
        meta = record_meta(self.serializer, tree, user_meta, description, logic_step)
        with self._lock:
            self._ensure_run()
            branch = self._current
            parent = self._heads.get(branch) or merge_parent
            parents = (parent,) if parent else ()
            if merge_parent and parent != merge_parent:
                parents = (*parents, merge_parent)
                meta["parents"] = list(parents)
            meta["branch"] = branch
            cid, now = new_id(), time.time()
            self._seq += 1
            record = StepRecord(
                run_id=self.name,
                step_id=cid,
                key=f"checkpoint:{cid}",
                kind="checkpoint",
                name=logic_step or description or "checkpoint",
                status="failed" if failed else "completed",
                seq=self._seq,
                parent_id=parent,
                output=tree,
                meta=meta,
                created_at=now,
                updated_at=now,
            )
            # TODO(store): one atomic "put step + set head" op; until then two writes.
            self.store.put_step(record)
            self.store.set_head(self.name, branch, cid)
            node = Checkpoint(
                cid,
                meta["hash"],
                parent,
                branch,
                description,
                logic_step,
                user_meta,
                now,
                parents,
                failed,
                tree,
                self.serializer,
            )
            self._nodes[cid] = node
            self._heads[branch] = cid
            self.metrics["total_checkpoints"] += 1
        self._emit(kind, branch)
        return node

    def rollback(self, steps: int = 1, to_checkpoint_id: str | None = None) -> Checkpoint:
        """Move the current branch's head back (like `git reset`); nothing is deleted.

        The checkpoints after the new head stay in the store and in `visualize_tree()` (as
        rolled back); a later checkpoint starts a new line of history from the new head.

        Args:
            steps: How many checkpoints to go back along the branch.
            to_checkpoint_id: Go to this checkpoint instead (id, id prefix or branch name).

        Returns:
            The checkpoint that is now the head.

        Raises:
            TimelineError: The branch is empty, has fewer than `steps` earlier checkpoints,
                or the checkpoint is unknown.
        """
        with self._lock:
            head = self.head
            if to_checkpoint_id is not None:
                target = self.get_checkpoint(to_checkpoint_id)
            else:
                if head is None:
                    raise TimelineError(
                        f"branch {self._current!r} of timeline {self.name!r} has no checkpoints"
                    )
                if not isinstance(steps, int) or steps < 1:
                    raise TimelineError(f"steps must be a positive integer, not {steps!r}")
                chain = list(self._ancestry(head, steps + 1))
                if len(chain) <= steps:
                    raise TimelineError(
                        f"cannot roll back {steps} step(s): branch {self._current!r} has only "
                        f"{len(chain) - 1} checkpoint(s) before its head"
                    )
                target = chain[steps]
            self._ensure_run()
            self._set_head(self._current, target.id)
            self.metrics["total_rollbacks"] += 1
        self._emit("rollback", self._current)
        return target

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

    def branch(self, name: str, from_checkpoint_id: str | None = None) -> Branch:
        """Create a branch at the head (or at `from_checkpoint_id`) and switch to it.

        Raises:
            TimelineError: The name is taken or invalid, or the checkpoint is unknown.
        """
        check_branch_name(name)
        with self._lock:
            if name in self._branch_names():
                raise TimelineError(
                    f"branch {name!r} already exists in timeline {self.name!r}: "
                    "use switch_branch() to go to it"
                )
            start = (
                self.get_checkpoint(from_checkpoint_id).id
                if from_checkpoint_id
                else self._heads.get(self._current)
            )
            self._ensure_run()
            if start:
                self._set_head(name, start)
            self._current = name
            self.store.set_head(self.name, HEAD, name)
            self.metrics["total_branches"] += 1
        self._emit("branch", name)
        return self._branch(name)

    def switch_branch(self, name: str) -> Branch:
        """Make `name` the current branch (like `git switch`).

        Raises:
            TimelineError: No such branch.
        """
        with self._lock:
            if name not in self._branch_names():
                raise TimelineError(
                    f"no branch {name!r} in timeline {self.name!r}; branches: "
                    f"{', '.join(sorted(self._branch_names()))}"
                )
            self._ensure_run()
            self._current = name
            self.store.set_head(self.name, HEAD, name)
        self._emit("switch", name)
        return self._branch(name)

    def list_branches(self) -> list[Branch]:
        """Every branch with its head, length and whether it is current, by name."""
        with self._lock:
            return [self._branch(name) for name in sorted(self._branch_names())]

    def delete_branch(self, name: str) -> None:
        """Remove a branch pointer; its checkpoints stay (shown as rolled back if unreachable).

        Raises:
            TimelineError: No such branch, or it is the current one.
        """
        with self._lock:
            if name == self._current:
                raise TimelineError(f"cannot delete the current branch {name!r}: switch first")
            if name not in self._heads:
                raise TimelineError(f"no branch {name!r} in timeline {self.name!r}")
            self.store.set_head(self.name, name, None)
            del self._heads[name]
        self._emit("delete_branch", name)

    # -- merge ------------------------------------------------------------------------------
    def merge_base(self, a: str, b: str) -> Checkpoint | None:
        """The nearest common ancestor of two checkpoints or branches (None if unrelated)."""
        return _graph.merge_base(self._nodes, self.get_checkpoint(a).id, self.get_checkpoint(b).id)

    def merge(
        self, source: str, strategy: MergeStrategy = "prefer_higher_confidence"
    ) -> Checkpoint:
        """Merge branch `source` into the current branch with a two-parent checkpoint.

        Args:
            source: The branch to merge in.
            strategy: `ours` (keep the current state), `theirs` (take the source's),
                `combine` (nested dict merge, the source wins conflicts),
                `prefer_higher_confidence` (the state whose metadata `confidence` is higher;
                the source on a tie), or `fn(ours, theirs[, base]) -> state`.

        Returns:
            The merge checkpoint; `parents` holds the current head and the source head.

        Raises:
            TimelineError: Unknown or empty source branch, or merging a branch into itself.
        """
        from ._merge import merge_into

        with self._lock:
            node = merge_into(self, source, strategy)
            self.metrics["total_merges"] += 1
        return node

    # -- inspection -------------------------------------------------------------------------
    def history(self, branch: str | None = None, limit: int = 50) -> list[Checkpoint]:
        """The branch's checkpoints, newest first, following first parents (like `git log`).

        Raises:
            TimelineError: No such branch.
        """
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
        return _graph.tree_nodes(self._nodes, self._heads, self._current)

    def visualize_tree(self, *, color: bool = False) -> str:
        """The whole checkpoint tree as text: ids, descriptions, statuses, branch heads."""
        with self._lock:
            names = ", ".join(
                f"{b} (HEAD)" if b == self._current else b for b in sorted(self._branch_names())
            )
            header = f"timeline {self.name}: {len(self._nodes)} checkpoint(s); branches: {names}"
            return header + "\n" + render_tree(self.tree_nodes(), color=color)

    # -- recovery and events ----------------------------------------------------------------
    def safe_execute(
        self,
        func: Callable[[Any], Any],
        state: Any,
        description: str = "",
        max_retries: int = 3,
        fallback: Callable[[Any], Any] | None = None,
        strategy: Any = None,
    ) -> tuple[Any, Checkpoint]:
        """Run `func(state)` with checkpoints, retries, recovery and a fallback branch.

        Each failed attempt is kept as a `failed` checkpoint and the head rolls back to the
        checkpoint of `state`; `strategy` (a `RecoveryStrategy`) may change the state before a
        retry (None from it stops retrying); `fallback` runs on a branch merged back with
        `theirs`. See `agentrewind._safe.safe_execute` for the details.

        Returns:
            `(result, checkpoint)` where the checkpoint holds the result.

        Raises:
            RecoveryError: Every attempt and the fallback failed; `__cause__` is the last error.
        """
        from ._safe import safe_execute

        return safe_execute(self, func, state, description, max_retries, fallback, strategy)

    def subscribe(
        self, pattern: str, callback: Callable[[_events.TimelineEvent], Any]
    ) -> _events.Subscription:
        """Call `callback(event)` on every change whose `branch:kind` or branch matches `pattern`.

        `pattern` is a glob: `*` (everything), `main` (changes of main), `*:merge`. Memory and
        SQLite deliver in-process (synchronously, in the thread that made the change); Redis
        delivers changes from every process through pub/sub on a background thread.

        Returns:
            A `Subscription`; call `close()` to stop.
        """
        return _events.subscribe(self.store, self.name, pattern, callback)
