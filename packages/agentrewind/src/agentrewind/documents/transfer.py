"""Moving runs through documents: export a run, import one, resume from one, fork a run.

Each function takes a `Store` or a store URL (opened for the call and closed after).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from ..records import INPUT_FIELDS, RunMetrics, StepRecord, base_key
from ..serde import Serializer
from ..serde.encryption import Encryption, Place, checkpoint_place, step_place
from ..serde.tags import TAG
from ..stores import Store, connect
from ..tree import find_cycle
from .document import (
    DESCRIPTIVE_FIELDS,
    DOC_KEY,
    DOC_KIND,
    STEP_FIELDS,
    DocumentError,
    RunDocument,
    RunNotFoundError,
    parse,
)

__all__ = ["export_run", "fork_run", "import_run", "resume_from", "run_matches"]

P = ParamSpec("P")
T = TypeVar("T")


def _closing_store(
    fn: Callable[Concatenate[Store, P], T],
) -> Callable[Concatenate[Store | str, P], T]:
    """Open a store given as a URL for the call and close it after; a `Store` is left open."""

    @functools.wraps(fn)
    def wrapper(store: Store | str, /, *args: P.args, **kwargs: P.kwargs) -> T:
        if isinstance(store, Store):
            return fn(store, *args, **kwargs)
        with connect(store) as opened:
            return fn(opened, *args, **kwargs)

    return wrapper


SOURCE_NAMESPACE = "source_namespace"
"""Key of a document's `meta` naming the namespace it was exported from."""


def _sealed(tree: Any) -> bool:
    return isinstance(tree, dict) and tree.get(TAG) == "enc"


def _places(record: StepRecord, namespace: str) -> list[tuple[str, Place]]:
    """The sealed fields of a record (`output`, and meta entries) and their places."""
    if record.kind == DOC_KIND:
        return []  # the document's own fields: descriptive copies, never opened
    if record.kind == "checkpoint":
        return [
            ("output", checkpoint_place(namespace, record.run_id, record.step_id, "state")),
            ("metadata", checkpoint_place(namespace, record.run_id, record.step_id, "metadata")),
        ]
    inputs = step_place(namespace, record.run_id, base_key(record.key), "inputs")
    return [
        ("output", step_place(namespace, record.run_id, record.key)),
        *((field, inputs) for field in INPUT_FIELDS),
    ]


_SEALED_META = ("metadata", *INPUT_FIELDS)


def moved_records(
    records: list[StepRecord],
    source: tuple[str, str],
    target: tuple[str, str],
    encryption: Encryption | None = None,
) -> list[StepRecord]:
    """`records` of run `source` = (namespace, run id) moved to `target`, re-encrypted.

    Encrypted values are bound to their namespace, run and record, so a copy under another
    run id or namespace is decrypted and sealed again for its new place. Plaintext values
    are copied as they are.

    Args:
        records: The run's steps (any run id: `source` names where they were sealed).
        source: `(namespace, run id)` the values were sealed for.
        target: `(namespace, run id)` they move to.
        encryption: The key; None reads `$AGENTREWIND_ENCRYPTION_KEY`.

    Raises:
        DocumentError: Encrypted values and no key (nothing is written by the callers).
        DecryptionError: A value does not open at its source place (wrong key, altered, a
            plaintext or v1 value outside migration mode...).
    """
    (src_ns, src_run), (dst_ns, dst_run) = source, target
    moved = [dataclasses.replace(r, run_id=dst_run) for r in records]
    if source == target:
        return moved
    sealed = [
        r for r in records if _sealed(r.output) or any(_sealed(r.meta.get(f)) for f in _SEALED_META)
    ]
    if not sealed:
        return moved
    encryption = encryption or Encryption.from_env()
    if encryption is None:
        raise DocumentError(
            f"run {src_run!r} (namespace {src_ns!r}) holds {len(sealed)} encrypted step(s): "
            "an encrypted value is bound to its namespace, run and step, so copying it to run "
            f"{dst_run!r} (namespace {dst_ns!r}) re-encrypts it, which needs the key: set "
            "$AGENTREWIND_ENCRYPTION_KEY (or pass encryption=Encryption(key)); nothing was "
            "written"
        )
    serializer = Serializer(encryption=encryption)
    out = []
    for old, new in zip(records, moved, strict=True):
        src = dataclasses.replace(old, run_id=src_run)
        output, meta = new.output, dict(new.meta)
        for field, place in _places(src, src_ns):
            dst = place.moved(dst_ns, dst_run)
            if field == "output":
                output = serializer.rebind(output, place, dst)
            elif field in meta:
                meta[field] = serializer.rebind(meta[field], place, dst)
        out.append(dataclasses.replace(new, output=output, meta=meta))
    return out


def _status(run_status: str) -> str:
    return run_status if run_status in ("failed", "paused", "completed", "partial") else "partial"


@_closing_store
def export_run(
    store: Store,
    run_id: str,
    *,
    task_summary: str | None = None,
    remaining_steps: list[Any] | None = None,
    retry_strategy: str | None = None,
    executor_hint: str | None = None,
    confidence: float | None = None,
    meta: dict[str, Any] | None = None,
) -> RunDocument:
    """Build the portable document of a run: steps, heads, status, state, failure, metrics.

    Fields a previous `import_run` stored (task summary, remaining steps...) come back unless
    given here. `state` and `confidence` come from a timeline's current head when the run is a
    timeline; `partial_output` is the newest completed output; `failure` the newest error.

    Raises:
        RunNotFoundError: No such run.
    """
    info = store.get_run(run_id)
    if info is None:
        raise RunNotFoundError(f"no run {run_id!r} in {store.url} (namespace {store.namespace})")
    records = store.load_steps(run_id)
    heads = store.get_heads(run_id)
    stored: dict[str, Any] = {}
    steps: list[StepRecord] = []
    for record in records:
        if record.kind == DOC_KIND and record.key == DOC_KEY:
            stored = dict(record.output or {})
        else:
            steps.append(record)
    status = _status(info.status)
    doc = RunDocument(
        run_id=run_id,
        status=status,
        steps=[{k: getattr(r, k) for k in STEP_FIELDS} for r in steps],
        heads=heads,
        metrics=info.metrics.as_dict(),
        created_at=stored.get("created_at", info.created_at),
        exported_at=time.time(),
        state=stored.get("state"),
        confidence=stored.get("confidence"),
        partial_output=stored.get("partial_output"),
        failure=stored.get("failure"),
        **{k: stored[k] for k in DESCRIPTIVE_FIELDS if k in stored},
    )
    head_id = heads.get(heads.get("HEAD", "main"))
    by_id = {r.step_id: r for r in steps}
    if head_id in by_id:
        head = by_id[head_id]
        doc.state = head.output
        doc.confidence = head.meta.get("confidence", doc.confidence)
    done = [r for r in steps if r.status == "completed"]
    if done:
        doc.partial_output = done[-1].output
    failed = [r for r in steps if r.status == "failed"]
    if status == "failed" and failed:
        error = failed[-1].meta.get("error") or {}
        doc.failure = {
            "reason": str(error.get("message") or failed[-1].meta.get("description") or "failed"),
            "type": error.get("type"),
            "step_id": failed[-1].step_id,
        }
    elif status == "failed" and doc.failure is None:
        doc.failure = {"reason": "the run failed", "type": None, "step_id": None}
    given = {
        "task_summary": task_summary,
        "remaining_steps": remaining_steps,
        "retry_strategy": retry_strategy,
        "executor_hint": executor_hint,
        "confidence": confidence,
        "meta": meta,
    }
    for name, value in given.items():
        if value is not None:
            setattr(doc, name, value)
    if any(_sealed(r.output) or _sealed(r.meta.get("metadata")) for r in steps):
        # encrypted values are bound to their namespace: an import elsewhere re-binds them
        doc.meta = {**doc.meta, SOURCE_NAMESPACE: store.namespace}
    return doc


@_closing_store
def import_run(
    store: Store,
    document: RunDocument | dict[str, Any] | str | bytes | Path,
    *,
    run_id: str | None = None,
    replace: bool = False,
    force: bool = False,
    encryption: Encryption | None = None,
) -> str:
    """Write a document's run into `store`: steps in one atomic write, then heads and status.

    Importing the same document twice is a no-op (`run_matches`); a document whose run id
    exists with other content is refused unless `replace`.

    Args:
        store: Target store (or URL).
        document: The document (parsed or not).
        run_id: Import under another run id.
        replace: Delete an existing run of that id first.
        force: With `replace`, delete it even while another process drives it (holds its
            lease); that process's next write then fails instead of writing half a run back.
        encryption: The key, to re-encrypt values imported under another run id or into
            another namespace than they were sealed for (None: `$AGENTREWIND_ENCRYPTION_KEY`).

    Returns:
        The run id in the store.

    Raises:
        DocumentError: Invalid document, a run of that id exists with other content, or
            encrypted values to move to another run or namespace and no key.
        DecryptionError: An encrypted value does not open where it was sealed.
        RunLockedError: `replace` on a run another process drives, without `force`.
    """
    doc = document if isinstance(document, RunDocument) else parse(document)
    target = run_id or doc.run_id
    from_ns = doc.meta.get(SOURCE_NAMESPACE) if isinstance(doc.meta, dict) else None
    source = (from_ns if isinstance(from_ns, str) else store.namespace, doc.run_id)
    records = moved_records(doc.records(), source, (store.namespace, target), encryption)
    cycle = find_cycle({r.step_id: [p for p in (r.parent_id, *_merged(r)) if p] for r in records})
    if cycle is not None:  # `parse` refuses it too; a RunDocument built in code is checked here
        raise DocumentError(f"run {target!r}: the steps' parents form a cycle; nothing imported")
    same = run_matches(store, target, doc)
    if same is not None:
        if same and not replace:
            return target
        if not replace:
            raise DocumentError(
                f"run {target!r} already exists in {store.url} with different content: pass "
                "replace=True (CLI --replace) or another run id (CLI --run-id)"
            )
        store.delete_run(target, force=force)
    fields = (*DESCRIPTIVE_FIELDS, "state", "confidence", "partial_output", "failure", "created_at")
    kept = {k: getattr(doc, k) for k in fields}
    record = StepRecord(target, f"document-{target}", DOC_KEY, DOC_KIND, "run-document",
                        "completed", 0, output=kept, created_at=time.time())  # fmt: skip
    store.begin_run(target)
    store.put_steps([record, *records], heads=doc.heads)
    store.end_run(target, doc.status, RunMetrics.from_dict(doc.metrics))
    return target


def _merged(record: StepRecord) -> list[str]:
    """A merge checkpoint's other parents (`meta.parents`)."""
    parents = record.meta.get("parents") if isinstance(record.meta, dict) else None
    return [p for p in parents if isinstance(p, str)] if isinstance(parents, list) else []


def run_matches(store: Store, run_id: str, document: RunDocument) -> bool | None:
    """Whether the store's run `run_id` holds exactly the document's steps and heads.

    Returns:
        None when no such run exists; True when every step (id, key, status, output, meta...)
        and every branch head are the same; False otherwise.
    """
    if store.get_run(run_id) is None:
        return None
    mine = {
        r.step_id: {k: getattr(r, k) for k in STEP_FIELDS}
        for r in store.load_steps(run_id)
        if r.kind != DOC_KIND
    }
    theirs = {r.step_id: {k: getattr(r, k) for k in STEP_FIELDS} for r in document.records(run_id)}
    return mine == theirs and store.get_heads(run_id) == dict(document.heads)


def resume_from(
    document: RunDocument | dict[str, Any] | str | bytes | Path,
    store: Store | str | None = None,
    *,
    run_id: str | None = None,
) -> str:
    """Make a document's run resumable here: import it (once) and return its run id.

    Then `with agentrewind.Middleware(store).run(run_id) as run:` replays the completed steps
    and runs the rest; `agentrewind.Timeline(run_id, store=store)` continues a timeline.
    """
    if isinstance(store, Store):
        return import_run(store, document, run_id=run_id)
    with connect(store) as opened:
        return import_run(opened, document, run_id=run_id)


@_closing_store
def fork_run(
    store: Store, run_id: str, *, at: str, to: str, encryption: Encryption | None = None
) -> int:
    """Copy a run's history up to step `at` into a new run `to` whose `main` head is `at`.

    For a timeline the copy is `at` and its ancestors (both parents of merges); for a journal
    run it is every step up to `at` in sequence order.

    Encrypted values are re-encrypted for the new run (they are bound to their run), with
    `encryption` or the key of `$AGENTREWIND_ENCRYPTION_KEY`.

    Returns:
        How many steps were copied.

    Raises:
        RunNotFoundError: No such run or step.
        DocumentError: `to` exists already, or the run is encrypted and no key is given
            (nothing is written).
        DecryptionError: A value does not open where it was sealed.
    """
    if store.get_run(run_id) is None:
        raise RunNotFoundError(f"no run {run_id!r} in {store.url} (namespace {store.namespace})")
    if store.get_run(to) is not None:
        raise DocumentError(f"run {to!r} already exists in {store.url}")
    records = store.load_steps(run_id)
    matches = [r for r in records if r.step_id == at or r.step_id.endswith(at)]
    if len(matches) != 1:
        raise RunNotFoundError(f"no single step {at!r} in run {run_id!r}")
    point = matches[0]
    by_id = {r.step_id: r for r in records}
    if any(r.kind == "checkpoint" for r in records):
        keep: set[str] = set()
        todo = [point.step_id]
        while todo:
            sid = todo.pop()
            if sid in keep or sid not in by_id:
                continue
            keep.add(sid)
            rec = by_id[sid]
            todo.extend([rec.parent_id] if rec.parent_id else [])
            todo.extend(p for p in rec.meta.get("parents", ()) if p)
        copied = [r for r in records if r.step_id in keep]
    else:
        copied = [r for r in records if r.seq <= point.seq and r.kind != DOC_KIND]
    ns = store.namespace
    copied = moved_records(copied, (ns, run_id), (ns, to), encryption)  # before any write
    origin = StepRecord(to, f"document-{to}", DOC_KEY, DOC_KIND, "run-document", "completed", 0,
                        output={"forked_from": run_id, "forked_at": point.step_id},
                        created_at=time.time())  # fmt: skip
    store.begin_run(to)
    store.put_steps([origin, *copied])
    store.set_head(to, "main", point.step_id)
    store.end_run(to, "partial", RunMetrics())
    return len(copied)
