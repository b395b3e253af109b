"""Whole-thread maintenance of `RewindSaver`: copy, prune, delete by run, purge expired.

A mixin of `SaverCore` (which holds the store, the backend and the write buffer); the async
twins in `saver.py` reuse the operations built here.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from agentrewind.adapters import Store

from ._codec import ListDeltas
from ._copy import probe_args, refuse_sealed, sealed, sealed_copy_ops
from ._lease import claim_for_delete, lease_name

__all__ = ["ThreadMaintenance"]


class ThreadMaintenance:
    """`delete_for_runs`, `copy_thread`, `prune` and `purge_expired` of the saver."""

    backend: Any
    store: Store
    ttl: float | None
    _deltas: ListDeltas

    if TYPE_CHECKING:

        def _flush(self, thread_id: str | None = None, *, forget: bool = False) -> None: ...
        def _delete_owner(self) -> str: ...
        def _deleted(self, thread_id: str, owner: str) -> None: ...
        def _delete_thread_op(self, thread_id: str) -> Any: ...

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose metadata `run_id` is in `run_ids`."""
        if run_ids:
            self._flush()
            self.backend.execute(self._delete_for_runs_op(run_ids))

    def _delete_for_runs_op(self, run_ids: Sequence[str]) -> Any:
        self._deltas.forget()
        return self.backend.delete_for_runs_op(list(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread's whole history (every namespace, value and write) to another id.

        An encrypting saver decrypts each value and seals it again for the new thread (its
        ciphertexts are bound to their thread); a saver without the key refuses to copy an
        encrypted thread (`DecryptionError`, nothing copied). See `_copy`.
        """
        self._flush(str(source_thread_id))
        src, dst = str(source_thread_id), str(target_thread_id)
        if sealed(self):
            self._deltas.forget(dst)
            for op in sealed_copy_ops(self, src, dst):
                self.backend.execute(op)
            return
        refuse_sealed(src, self.backend.query(**probe_args(src)))
        self.backend.execute(self._copy_thread_op(source_thread_id, target_thread_id))

    def _copy_thread_op(self, source_thread_id: str, target_thread_id: str) -> Any:
        op = self.backend.copy_thread_op(
            str(source_thread_id), str(target_thread_id), time.time(), self.ttl
        )
        self._deltas.forget(str(target_thread_id))
        return op

    def prune(
        self,
        thread_ids: Sequence[str] | None = None,
        *,
        strategy: str = "keep_latest",
        keep_last: int | None = None,
    ) -> None:
        """Delete old checkpoints.

        Args:
            thread_ids: Threads to prune; None: every thread of the namespace.
            strategy: `"keep_latest"` keeps the newest `keep_last` (default 1) checkpoints per
                namespace, plus the ancestors a `DeltaChannel` needs to rebuild its value;
                `"delete"` deletes the threads.
            keep_last: How many checkpoints per namespace `"keep_latest"` keeps.

        Raises:
            ValueError: Unknown strategy or a negative `keep_last`.
            RunLockedError: `"delete"` of a thread a leased saver holds; nothing was deleted.
        """
        self._flush()
        ids, strategy, keep = self._prune_args(thread_ids, strategy, keep_last)
        owner, claimed = self._delete_owner(), []
        try:
            for t in ids if strategy == "delete" else ():  # every lease first, or none
                claim_for_delete(self.store, t, owner, False)
                claimed.append(t)
            for op in self._prune_ops(ids, strategy, keep):
                self.backend.execute(op)
        finally:
            for t in claimed:
                self.store.release_lease(lease_name(t), owner)
                self._deleted(t, owner)
            self._deleted("", owner)

    def _prune_args(
        self, thread_ids: Sequence[str] | None, strategy: str, keep_last: int | None
    ) -> tuple[builtins.list[str], str, int]:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'")
        keep = 1 if keep_last is None else keep_last
        if keep < 0:
            raise ValueError(f"keep_last must be >= 0, not {keep_last!r}")
        ids = self.backend.thread_ids() if thread_ids is None else [str(t) for t in thread_ids]
        return ids, strategy, keep

    def _prune_ops(self, ids: builtins.list[str], strategy: str, keep: int) -> Iterator[Any]:
        """The operations `prune` runs in order (built lazily: each forgets its deltas)."""
        if strategy == "delete":
            for t in ids:
                yield self._delete_thread_op(t)
        elif ids:
            self._deltas.forget()
            yield self.backend.prune_op(ids, keep)

    def purge_expired(self) -> int:
        """Delete threads whose TTL ran out (Redis expires them itself); returns how many."""
        self._flush()
        return int(self.backend.execute(self.backend.purge_expired_op(time.time())))
