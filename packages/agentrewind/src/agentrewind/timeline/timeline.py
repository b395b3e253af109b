"""`Timeline`: git-like checkpoints of an agent's state, persisted in a store.

A timeline is a run (`run_id` = its name) whose steps are checkpoints (`kind="checkpoint"`)
linked by `parent_id`; branches are the run's heads (`store.set_head`), and the reserved head
`HEAD` names the current branch. Rollback moves a head back and never deletes a checkpoint;
merge writes a checkpoint with both parents (`meta["parents"]`). The Timeline object caches heads
and checkpoints, so `checkpoint()` makes one atomic write (the step and its branch head) and
never reads history.

Every write has an async twin (`acheckpoint`, `arollback`...). Both run the same flow (see
`agentrewind.timeline.flow`): the sync one in the calling thread, the async one through the store's
`a*` methods. Reads (`get_state`, `history`, `diff`, `visualize_tree`...) answer from memory
and need no twin; `arefresh()` reloads from the store.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from ..errors import StoreClosedError
from ..ids import check_id
from ..serde import Serializer
from ..stores import Store
from ..stores.leases import retire_lease_owner
from . import events as _events
from . import ops as ops
from .base import TimelineBase
from .checkpoint import HEAD, Branch, Checkpoint, TimelineError
from .merge import MergeStrategy, merge
from .recovery import RecoveryStrategy
from .safe import safe_execute

__all__ = ["HEAD", "Branch", "Checkpoint", "Timeline", "TimelineError"]


class Timeline(TimelineBase):
    """Checkpoints, rollback, branches and merges of an agent's state, kept in a store.

    One object is safe to share between threads (sync methods) and between the tasks of an
    event loop (async methods): its writes are serialised.

    Args:
        name: The timeline (its run id in the store). The same name opens the same timeline
            from any process.
        store: A `Store`, a store URL, or None for the default store.
        serializer: How states are encoded (default: JSON with type tags, no pickle).
        events: Publish changes for `subscribe` (one `PUBLISH` per change on Redis).
        load: Read the timeline from the store now; `Timeline.aopen` passes False and loads
            it asynchronously.
        lease_ttl: Seconds the timeline's lease lasts. One `Timeline` object writes a timeline
            at a time: the first write takes the timeline's lease (another live writer gets
            `RunLockedError`), writes renew it, `close()` (or garbage collection) frees it,
            and every write is fenced by it (`LeaseLostError` once another process took it
            over). Reading needs no lease.

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
        load: bool = True,
        lease_ttl: float = 30.0,
    ) -> None:
        name = check_id(name, "timeline name")
        super().__init__(name, store, serializer=serializer, events=events, lease_ttl=lease_ttl)
        if load:
            self.refresh()

    @classmethod
    async def aopen(
        cls,
        name: str,
        store: Store | str | None = None,
        *,
        serializer: Serializer | None = None,
        events: bool = True,
    ) -> Timeline:
        """Open a timeline and load it with the store's async methods (see `Timeline`)."""
        tl = cls(name, store, serializer=serializer, events=events, load=False)
        await tl.arefresh()
        return tl

    def __enter__(self) -> Timeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Timeline:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def close(self) -> None:
        """Free the timeline's lease, and close the store if this timeline opened it."""
        try:
            if self._lease_at > float("-inf"):
                self._lease_at = float("-inf")
                with contextlib.suppress(StoreClosedError):  # closed first: the lease lapses
                    self.store.release_lease(self.name, self._owner)
        finally:
            retire_lease_owner(self._owner)
            if self._owns_store:
                self.store.close()

    async def aclose(self) -> None:
        """Async twin of `close`."""
        try:
            if self._lease_at > float("-inf"):
                self._lease_at = float("-inf")
                with contextlib.suppress(StoreClosedError):
                    await self.store.arelease_lease(self.name, self._owner)
        finally:
            retire_lease_owner(self._owner)
            if self._owns_store:
                await self.store.aclose()

    def refresh(self) -> None:
        """Reload checkpoints and heads from the store (changes made by other processes)."""
        self._runner.run(ops.refresh(self))

    async def arefresh(self) -> None:
        """Async twin of `refresh`."""
        await self._runner.arun(ops.refresh(self))

    # -- checkpoints ------------------------------------------------------------------------
    def checkpoint(
        self,
        state: Any,
        metadata: dict[str, Any] | None = None,
        description: str = "",
        logic_step: str = "",
    ) -> Checkpoint:
        """Save `state` as the new head of the current branch (like `git commit`).

        The checkpoint and its branch head are written in one atomic store write.

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
        return self._runner.run(ops.checkpoint(self, state, metadata, description, logic_step))

    async def acheckpoint(
        self,
        state: Any,
        metadata: dict[str, Any] | None = None,
        description: str = "",
        logic_step: str = "",
    ) -> Checkpoint:
        """Async twin of `checkpoint`."""
        flow = ops.checkpoint(self, state, metadata, description, logic_step)
        return await self._runner.arun(flow)

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
        return self._runner.run(ops.rollback(self, steps, to_checkpoint_id))

    async def arollback(self, steps: int = 1, to_checkpoint_id: str | None = None) -> Checkpoint:
        """Async twin of `rollback`."""
        return await self._runner.arun(ops.rollback(self, steps, to_checkpoint_id))

    # -- branches ---------------------------------------------------------------------------
    def branch(self, name: str, from_checkpoint_id: str | None = None) -> Branch:
        """Create a branch at the head (or at `from_checkpoint_id`) and switch to it.

        Raises:
            TimelineError: The name is taken or invalid, or the checkpoint is unknown.
        """
        return self._runner.run(ops.branch(self, name, from_checkpoint_id))

    async def abranch(self, name: str, from_checkpoint_id: str | None = None) -> Branch:
        """Async twin of `branch`."""
        return await self._runner.arun(ops.branch(self, name, from_checkpoint_id))

    def switch_branch(self, name: str) -> Branch:
        """Make `name` the current branch (like `git switch`).

        Raises:
            TimelineError: No such branch.
        """
        return self._runner.run(ops.switch_branch(self, name))

    async def aswitch_branch(self, name: str) -> Branch:
        """Async twin of `switch_branch`."""
        return await self._runner.arun(ops.switch_branch(self, name))

    def delete_branch(self, name: str) -> None:
        """Remove a branch pointer; its checkpoints stay (shown as rolled back if unreachable).

        Raises:
            TimelineError: No such branch, or it is the current one.
        """
        self._runner.run(ops.delete_branch(self, name))

    async def adelete_branch(self, name: str) -> None:
        """Async twin of `delete_branch`."""
        await self._runner.arun(ops.delete_branch(self, name))

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
        return self._runner.run(merge(self, source, strategy))

    async def amerge(
        self, source: str, strategy: MergeStrategy = "prefer_higher_confidence"
    ) -> Checkpoint:
        """Async twin of `merge`."""
        return await self._runner.arun(merge(self, source, strategy))

    # -- recovery and events ----------------------------------------------------------------
    def safe_execute(
        self,
        func: Callable[[Any], Any],
        state: Any,
        description: str = "",
        max_retries: int = 3,
        fallback: Callable[[Any], Any] | None = None,
        strategy: RecoveryStrategy | None = None,
    ) -> tuple[Any, Checkpoint]:
        """Run `func(state)` with checkpoints, retries, recovery and a fallback branch.

        Each failed attempt is kept as a `failed` checkpoint and the head rolls back to the
        checkpoint of `state`; `strategy` (a `RecoveryStrategy`) may change the state before a
        retry (None from it stops retrying); `fallback` runs on a branch merged back with
        `theirs`. See `agentrewind.timeline.safe.safe_execute` for the details.

        Returns:
            `(result, checkpoint)` where the checkpoint holds the result.

        Raises:
            RecoveryError: Every attempt and the fallback failed; `__cause__` is the last error.
            TimelineError: `func` or `fallback` returned an awaitable (use `asafe_execute`).
        """
        flow = safe_execute(self, func, state, description, max_retries, fallback, strategy)
        return self._runner.run(flow)

    async def asafe_execute(
        self,
        func: Callable[[Any], Any],
        state: Any,
        description: str = "",
        max_retries: int = 3,
        fallback: Callable[[Any], Any] | None = None,
        strategy: RecoveryStrategy | None = None,
    ) -> tuple[Any, Checkpoint]:
        """Async twin of `safe_execute`: `func` and `fallback` may be sync or async.

        Waits of `RetryWithBackoff` use `asyncio.sleep` (or its `sleep`, awaited when it
        returns an awaitable).
        """
        flow = safe_execute(self, func, state, description, max_retries, fallback, strategy)
        return await self._runner.arun(flow)

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
