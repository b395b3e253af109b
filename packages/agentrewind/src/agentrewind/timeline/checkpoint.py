"""The values a `Timeline` hands out: checkpoints and branches, and its error type."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from typing import Any

from ..errors import AgentRewindError
from ..ids import new_id
from ..records import StepRecord
from ..serde import Serializer
from ..serde.encryption import checkpoint_place

__all__ = [
    "HEAD",
    "Branch",
    "Checkpoint",
    "TimelineError",
    "check_branch_name",
    "new_checkpoint",
    "record_meta",
    "state_hash",
]

HEAD = "HEAD"
"""Reserved head name whose value is the current branch (like git's `.git/HEAD`)."""


class TimelineError(AgentRewindError, ValueError):
    """A timeline operation that cannot be done (unknown branch or checkpoint, bad name...)."""


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class Checkpoint:
    """A saved state of the agent. `state` decodes a fresh copy on every access.

    Attributes:
        id: Unique, time-ordered id (the step id).
        hash: First 16 hex digits of the SHA-256 of the state's canonical JSON.
        parent_id: The checkpoint before it on its branch (None for a root).
        branch: The branch it was written on.
        description: Human-readable description.
        logic_step: Name of the reasoning step.
        metadata: What the caller passed (confidence, tokens...).
        timestamp: Unix time it was written.
        parents: Every parent; two for a merge (`parent_id` first).
        failed: Written by `safe_execute` for an attempt that raised.
    """

    id: str
    hash: str
    parent_id: str | None
    branch: str
    description: str
    logic_step: str
    metadata: dict[str, Any]
    timestamp: float
    parents: tuple[str, ...]
    failed: bool
    tree: Any = dataclasses.field(repr=False)
    serializer: Serializer = dataclasses.field(repr=False)
    run_id: str = dataclasses.field(default="", repr=False)
    namespace: str = dataclasses.field(default="", repr=False)

    @property
    def state(self) -> Any:
        """The saved state (a new copy each time)."""
        place = checkpoint_place(self.namespace, self.run_id, self.id, "state")
        return self.serializer.open(self.tree, place)

    @property
    def is_merge(self) -> bool:
        """True when the checkpoint has two parents."""
        return len(self.parents) > 1

    @classmethod
    def from_record(
        cls, record: StepRecord, serializer: Serializer, namespace: str = ""
    ) -> Checkpoint:
        """Rebuild a checkpoint from its stored step (of the store's `namespace`)."""
        meta = record.meta
        metadata: dict[str, Any] = {}
        if "metadata" in meta:  # absent when the caller gave none: nothing was sealed
            place = checkpoint_place(namespace, record.run_id, record.step_id, "metadata")
            metadata = serializer.open(meta["metadata"], place)
        parents = tuple(p for p in meta.get("parents", ()) if p) or (
            (record.parent_id,) if record.parent_id else ()
        )
        return cls(
            id=record.step_id,
            hash=meta.get("hash") or state_hash(record.output),
            parent_id=record.parent_id,
            branch=meta.get("branch", "main"),
            description=meta.get("description", ""),
            logic_step=meta.get("logic_step", ""),
            metadata=metadata,
            timestamp=record.created_at,
            parents=parents,
            failed=record.status == "failed",
            tree=record.output,
            serializer=serializer,
            run_id=record.run_id,
            namespace=namespace,
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly summary (the state as its serializer tree)."""
        return {
            "id": self.id,
            "hash": self.hash,
            "parent_id": self.parent_id,
            "parents": list(self.parents),
            "branch": self.branch,
            "description": self.description,
            "logic_step": self.logic_step,
            "metadata": self.metadata,
            "timestamp": self.timestamp,
            "failed": self.failed,
            "state": self.tree,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class Branch:
    """A named head of the timeline."""

    name: str
    head: str | None
    checkpoint_count: int
    is_current: bool

    def to_dict(self) -> dict[str, Any]:
        """Return the branch as a plain dict."""
        return dataclasses.asdict(self)


def state_hash(tree: Any) -> str:
    """Content hash of a serializer tree (canonical JSON, SHA-256, 16 hex digits)."""
    text = json.dumps(tree, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def check_branch_name(name: str) -> None:
    """Raise `TimelineError` for a name that cannot be a branch (empty, `HEAD`, too long)."""
    if not isinstance(name, str) or not name.strip() or name == HEAD or len(name) > 200:
        raise TimelineError(f"invalid branch name {name!r}: use a non-empty name other than HEAD")


def record_meta(
    serializer: Serializer,
    tree: Any,
    metadata: dict[str, Any],
    description: str,
    logic_step: str,
    *,
    namespace: str = "",
    run_id: str = "",
    checkpoint_id: str = "",
) -> dict[str, Any]:
    """The `meta` of a checkpoint's step: hash, user metadata, confidence, labels.

    The metadata is sealed for the checkpoint `checkpoint_id` of run `run_id` in `namespace`.
    """
    meta: dict[str, Any] = {"hash": state_hash(tree)}
    if metadata:
        place = checkpoint_place(namespace, run_id, checkpoint_id, "metadata")
        meta["metadata"] = serializer.store_tree(metadata, "metadata", place)
        confidence = metadata.get("confidence")
        if isinstance(confidence, int | float) and not isinstance(confidence, bool):
            meta["confidence"] = confidence
    if description:
        meta["description"] = description
    if logic_step:
        meta["logic_step"] = logic_step
    return meta


def new_checkpoint(
    serializer: Serializer,
    run_id: str,
    seq: int,
    branch: str,
    parents: tuple[str, ...],
    tree: Any,
    meta: dict[str, Any],
    user_meta: dict[str, Any],
    description: str,
    logic_step: str,
    *,
    failed: bool = False,
    checkpoint_id: str | None = None,
    namespace: str = "",
) -> tuple[StepRecord, Checkpoint]:
    """The step that stores a new checkpoint, and the checkpoint it loads back as.

    Args:
        serializer: Encodes the state (`tree` is already its tree).
        run_id: The timeline.
        seq: The step's sequence number in the run.
        branch: Where it is written.
        parents: First parent (the branch head) then, for a merge, the merged head.
        tree: The state's serializer tree.
        meta: The step meta from `record_meta`; `branch` and `parents` are added here.
        user_meta: The caller's metadata (the checkpoint's `metadata`).
        description: Human-readable description.
        logic_step: Name of the reasoning step.
        failed: Store it as a failed attempt.
        checkpoint_id: Its id, when `tree` was sealed for it (default: a new id).
        namespace: The store's namespace.
    """
    cid, now = checkpoint_id or new_id(), time.time()
    parent = parents[0] if parents else None
    if len(parents) > 1:
        meta["parents"] = list(parents)
    meta["branch"] = branch
    record = StepRecord(
        run_id=run_id,
        step_id=cid,
        key=f"checkpoint:{cid}",
        kind="checkpoint",
        name=logic_step or description or "checkpoint",
        status="failed" if failed else "completed",
        seq=seq,
        parent_id=parent,
        output=tree,
        meta=meta,
        created_at=now,
        updated_at=now,
    )
    node = Checkpoint(
        cid, meta["hash"], parent, branch, description, logic_step, user_meta, now, parents,
        failed, tree, serializer, run_id, namespace,
    )  # fmt: skip
    return record, node
