"""`Store.prune`: which runs are due, and deleting them in batches.

Each backend deletes a batch its own way (`Store._delete_many`): one transaction on SQLite and
PostgreSQL, one pipeline per batch on Redis; the default deletes run by run. (`store` is a
`Store`: typed `Any` here, since `base` imports this module.)
"""

from __future__ import annotations

import time
from typing import Any

from ..errors import RunLockedError

__all__ = ["PruneResult", "delete_each", "due_runs"]


class PruneResult(int):
    """How many runs `prune` deleted (an `int`), and which leased runs it skipped."""

    skipped: tuple[str, ...]
    """Runs that were due but another process is driving (live lease); pass `force=True`."""

    def __new__(cls, deleted: int, skipped: tuple[str, ...] = ()) -> PruneResult:
        self = super().__new__(cls, deleted)
        self.skipped = skipped
        return self


BATCH = 500
"""Runs deleted per pipeline (Redis) or per statement batch."""


def due_runs(store: Any, keep_last: int | None, older_than: float | None) -> list[str]:
    """The runs `prune` deletes: beyond the `keep_last` newest, or idle `older_than` seconds.

    Raises:
        ValueError: `keep_last` or `older_than` is negative (it would delete every run).
    """
    if keep_last is not None and keep_last < 0:
        raise ValueError(f"keep_last must be 0 or more, not {keep_last}")
    if older_than is not None and older_than < 0:
        raise ValueError(f"older_than must be 0 or more seconds, not {older_than}")
    if keep_last is None and older_than is None:
        return []
    runs = store.list_runs(limit=1_000_000)
    now = time.time()
    return [
        run.run_id
        for i, run in enumerate(runs)
        if (keep_last is not None and i >= keep_last)
        or (older_than is not None and now - run.updated_at > older_than)
    ]


def delete_each(store: Any, run_ids: list[str], force: bool) -> tuple[int, list[str]]:
    """Delete runs one by one: how many were deleted, and the leased ones skipped."""
    deleted, skipped = 0, []
    for run_id in run_ids:
        try:
            deleted += store.delete_run(run_id, force=force)
        except RunLockedError:
            skipped.append(run_id)
    return deleted, skipped
