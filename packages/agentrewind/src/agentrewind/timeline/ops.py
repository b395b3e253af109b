"""The writes of a `Timeline` as flows (see `agentrewind.timeline.flow`), shared by sync and async.

Each public operation is a flow that runs its decision and store write under the timeline's
lock (`Locked`), updates the in-memory view only after the write succeeded, and then publishes
the change for `subscribe`. A checkpoint and its branch head move in one atomic store write
(`store.put_steps(records, heads=...)`).
"""

from __future__ import annotations

import time
from typing import Any

from ..errors import DataLostError, LeaseLostError, RunLockedError
from ..ids import new_id
from ..records import RunMetrics
from ..serde.encryption import checkpoint_place
from ..stores.leases import fence_error
from . import events as _events
from .base import TimelineBase
from .checkpoint import (
    HEAD,
    Branch,
    Checkpoint,
    TimelineError,
    check_branch_name,
    new_checkpoint,
    record_meta,
)
from .flow import Blocking, Flow, Locked, StoreCall

__all__ = [
    "branch",
    "checkpoint",
    "commit_locked",
    "delete_branch",
    "emit",
    "refresh",
    "rollback",
    "switch_branch",
]


def refresh(tl: TimelineBase) -> Flow[None]:
    """Reload checkpoints and heads from the store (changes made by other processes)."""
    records = yield StoreCall("load_steps", (tl.name,))
    heads = yield StoreCall("get_heads", (tl.name,))
    with tl._lock:
        tl._load(records, heads)


def _hold_lease(tl: TimelineBase) -> Flow[None]:
    """Make sure this timeline holds its run's lease before a write (caller holds the lock).

    The lease is taken on the first write and renewed by writes (at most every third of
    `lease_ttl`); every write is fenced by it in the store. A lease that lapsed (this process
    was paused or idle longer than `lease_ttl`) is never silently re-taken over another
    writer's work: it is taken again and the view reloaded, and if another writer moved the
    timeline meanwhile (or holds it now) the write is refused with `LeaseLostError`, since
    the state this writer is about to record was computed before those changes. The next
    write then goes on from the reloaded view.
    """
    age = time.monotonic() - tl._lease_at
    if age < tl.lease_ttl / 3:
        return
    sent = time.monotonic()
    if age < tl.lease_ttl:
        result = yield StoreCall("renew_lease", (tl.name, tl._owner, tl.lease_ttl))
        if result.acquired:
            tl._lease_at = sent
            return
        exists = (yield StoreCall("get_run", (tl.name,))) is not None
        tl._lease_at = float("-inf")
        raise fence_error(tl.name, tl._owner, result[1], result[2], exists)
    lapsed = tl._lease_at > float("-inf")  # held, then not renewed within lease_ttl
    tl._lease_at = float("-inf")
    result = yield StoreCall("acquire_lease", (tl.name, tl._owner, tl.lease_ttl))
    if not result.acquired:
        if lapsed:
            yield from refresh(tl)
            raise LeaseLostError(tl.name, result[1], result[2], writer=tl._owner)
        raise RunLockedError(tl.name, result[1], result[2])
    seen = _moves(tl)
    yield from refresh(tl)
    if lapsed and _moves(tl) != seen:
        yield StoreCall("release_lease", (tl.name, tl._owner))
        raise LeaseLostError(tl.name, "", 0.0, writer=tl._owner)
    tl._lease_at = sent


def _moves(tl: TimelineBase) -> tuple[object, ...]:
    """What another writer's changes would move: the last seq, the heads and HEAD."""
    heads = {b: h for b, h in tl._heads.items() if h in tl._nodes}
    return tl._seq, heads, tl._current


def _write(tl: TimelineBase, method: str, args: tuple[Any, ...], **kwargs: Any) -> Flow[None]:
    """A store write fenced by the timeline's lease; a fenced-off write drops the lease."""
    try:
        yield StoreCall(method, args, {**kwargs, "owner": tl._owner})
    except (LeaseLostError, DataLostError):
        tl._lease_at = float("-inf")  # the next write takes the lease again, and reloads
        raise


def _ensure_run(tl: TimelineBase) -> Flow[None]:
    yield from _hold_lease(tl)
    if tl._created:
        return
    if (yield StoreCall("get_run", (tl.name,))) is None:
        yield from _write(tl, "begin_run", (tl.name,))
        yield from _write(tl, "end_run", (tl.name, "active", RunMetrics()))
    tl._created = True


def _notice(
    tl: TimelineBase, kind: str, branch: str, head: str | None, node: Checkpoint | None = None
) -> dict[str, Any]:
    """The keyword of an operation's last write that sends its change in the write itself.

    Where the store can (PostgreSQL: a NOTIFY in the write's transaction, delivered only if
    it commits). `head` is where `branch` points after the write (`node`, when not in the view yet).
    """
    if not tl._events or not _events.notifies_in_write(tl.store):
        return {}
    node = node or (tl._nodes.get(head) if head else None)
    event = _events.TimelineEvent(
        tl.name, kind, branch, head, node.hash if node else None, time.time()
    )
    return {"notify": _events.notice(tl.store, event)}


def emit(tl: TimelineBase, kind: str, branch: str) -> Flow[None]:
    """Publish a change to `subscribe`rs (a Redis `PUBLISH`, or in-process callbacks).

    A store that sends changes inside the write (`_notice`) has already sent it.
    """
    if not tl._events or _events.notifies_in_write(tl.store):
        return
    remote = _events.is_remote(tl.store)
    if not remote and not _events.has_local_subscribers(tl.store, tl.name):
        return
    head = tl._heads.get(branch)
    node = tl._nodes.get(head) if head else None
    event = _events.TimelineEvent(
        tl.name, kind, branch, head, node.hash if node else None, time.time()
    )
    if remote:
        yield Blocking(_events.publish, (tl.store, event))
    else:
        _events.publish(tl.store, event)


def commit_locked(
    tl: TimelineBase,
    state: Any,
    metadata: dict[str, Any] | None,
    description: str,
    logic_step: str,
    *,
    failed: bool = False,
    merge_parent: str | None = None,
    kind: str = "checkpoint",
) -> Flow[Checkpoint]:
    """Write a checkpoint on the current branch and move its head (caller holds the lock)."""
    tree = tl.serializer.prepare(state, "state")
    user_meta = dict(metadata) if metadata else {}
    cid = new_id()  # known before sealing: the ciphertexts are bound to it
    meta = record_meta(
        tl.serializer, tree, user_meta, description, logic_step,
        namespace=tl.namespace, run_id=tl.name, checkpoint_id=cid,
    )  # fmt: skip
    tree = tl.serializer.seal(tree, checkpoint_place(tl.namespace, tl.name, cid, "state"))
    yield from _ensure_run(tl)
    branch = tl._current
    parent = tl._heads.get(branch) or merge_parent
    parents: tuple[str, ...] = (parent,) if parent else ()
    if merge_parent and parent != merge_parent:
        parents = (*parents, merge_parent)
    seq = tl._seq + 1
    record, node = new_checkpoint(
        tl.serializer, tl.name, seq, branch, parents, tree, meta, user_meta, description,
        logic_step, failed=failed, checkpoint_id=cid, namespace=tl.namespace,
    )  # fmt: skip
    notice = _notice(tl, kind, branch, node.id, node)
    yield from _write(tl, "put_steps", ([record],), heads={branch: node.id}, **notice)
    tl._seq = seq
    tl._nodes[node.id] = node
    tl._heads[branch] = node.id
    tl.metrics["total_checkpoints"] += 1
    return node


def checkpoint(
    tl: TimelineBase,
    state: Any,
    metadata: dict[str, Any] | None,
    description: str,
    logic_step: str,
    *,
    failed: bool = False,
) -> Flow[Checkpoint]:
    """`Timeline.checkpoint` (and the failed-attempt checkpoints of recovery)."""
    node: Checkpoint = yield Locked(
        commit_locked(tl, state, metadata, description, logic_step, failed=failed)
    )
    yield from emit(tl, "checkpoint", node.branch)
    return node


def _rollback_target(tl: TimelineBase, steps: int, to_checkpoint_id: str | None) -> Checkpoint:
    if to_checkpoint_id is not None:
        return tl.get_checkpoint(to_checkpoint_id)
    head = tl.head
    if head is None:
        raise TimelineError(f"branch {tl._current!r} of timeline {tl.name!r} has no checkpoints")
    if not isinstance(steps, int) or steps < 1:
        raise TimelineError(f"steps must be a positive integer, not {steps!r}")
    chain = list(tl._ancestry(head, steps + 1))
    if len(chain) <= steps:
        raise TimelineError(
            f"cannot roll back {steps} step(s): branch {tl._current!r} has only "
            f"{len(chain) - 1} checkpoint(s) before its head"
        )
    return chain[steps]


def _rollback_locked(
    tl: TimelineBase, steps: int, to_checkpoint_id: str | None
) -> Flow[Checkpoint]:
    target = _rollback_target(tl, steps, to_checkpoint_id)
    yield from _ensure_run(tl)
    notice = _notice(tl, "rollback", tl._current, target.id)
    yield from _write(tl, "set_head", (tl.name, tl._current, target.id), **notice)
    tl._heads[tl._current] = target.id
    tl.metrics["total_rollbacks"] += 1
    return target


def rollback(
    tl: TimelineBase, steps: int = 1, to_checkpoint_id: str | None = None
) -> Flow[Checkpoint]:
    """`Timeline.rollback`: move the current head back; nothing is deleted."""
    target: Checkpoint = yield Locked(_rollback_locked(tl, steps, to_checkpoint_id))
    yield from emit(tl, "rollback", tl._current)
    return target


def _branch_locked(tl: TimelineBase, name: str, from_checkpoint_id: str | None) -> Flow[None]:
    if name in tl._branch_names():
        raise TimelineError(
            f"branch {name!r} already exists in timeline {tl.name!r}: "
            "use switch_branch() to go to it"
        )
    start = (
        tl.get_checkpoint(from_checkpoint_id).id
        if from_checkpoint_id
        else tl._heads.get(tl._current)
    )
    yield from _ensure_run(tl)
    if start:
        yield from _write(tl, "set_head", (tl.name, name, start))
        tl._heads[name] = start
    notice = _notice(tl, "branch", name, tl._heads.get(name))
    yield from _write(tl, "set_head", (tl.name, HEAD, name), **notice)
    tl._current = name
    tl.metrics["total_branches"] += 1


def branch(tl: TimelineBase, name: str, from_checkpoint_id: str | None = None) -> Flow[Branch]:
    """`Timeline.branch`: a new head at the current head (or a checkpoint), made current."""
    check_branch_name(name)
    yield Locked(_branch_locked(tl, name, from_checkpoint_id))
    yield from emit(tl, "branch", name)
    return tl._branch(name)


def _switch_locked(tl: TimelineBase, name: str) -> Flow[None]:
    if name not in tl._branch_names():
        raise TimelineError(
            f"no branch {name!r} in timeline {tl.name!r}; branches: "
            f"{', '.join(sorted(tl._branch_names()))}"
        )
    yield from _ensure_run(tl)
    notice = _notice(tl, "switch", name, tl._heads.get(name))
    yield from _write(tl, "set_head", (tl.name, HEAD, name), **notice)
    tl._current = name


def switch_branch(tl: TimelineBase, name: str) -> Flow[Branch]:
    """`Timeline.switch_branch`: make `name` the current branch."""
    yield Locked(_switch_locked(tl, name))
    yield from emit(tl, "switch", name)
    return tl._branch(name)


def _delete_locked(tl: TimelineBase, name: str) -> Flow[None]:
    if name == tl._current:
        raise TimelineError(f"cannot delete the current branch {name!r}: switch first")
    if name not in tl._heads:
        raise TimelineError(f"no branch {name!r} in timeline {tl.name!r}")
    yield from _ensure_run(tl)
    notice = _notice(tl, "delete_branch", name, None)
    yield from _write(tl, "set_head", (tl.name, name, None), **notice)
    del tl._heads[name]


def delete_branch(tl: TimelineBase, name: str) -> Flow[None]:
    """`Timeline.delete_branch`: remove a branch pointer; its checkpoints stay."""
    yield Locked(_delete_locked(tl, name))
    yield from emit(tl, "delete_branch", name)
