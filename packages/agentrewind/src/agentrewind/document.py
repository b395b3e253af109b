"""Portable run documents (DESIGN §6): hand a run to another process, machine or agent.

A document is versioned JSON (`format: "agentrewind.run"`, `version: 1`) holding every step of
the run (with ids, parent ids, keys and serialized outputs), its branch heads, status, metrics,
state, and how to continue it (`retry_strategy`, `executor_hint`, `remaining_steps`). The JSON
Schema ships in the package (`agentrewind/schemas/run-document.schema.json`); `validate` checks
against it and returns every problem with its field.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from ._schema import check, load_schema
from .errors import AgentRewindError
from .records import RunMetrics, StepRecord
from .stores import Store, connect

__all__ = [
    "DOCUMENT_FORMAT",
    "DOCUMENT_VERSION",
    "DocumentError",
    "RunDocument",
    "RunNotFoundError",
    "ValidationIssue",
    "emit",
    "export_run",
    "fork_run",
    "import_run",
    "parse",
    "resume_from",
    "schema_path",
    "validate",
]

DOCUMENT_FORMAT = "agentrewind.run"
DOCUMENT_VERSION = 1
DOC_KIND = "document"
"""Kind of the one record that keeps a document's descriptive fields inside the run."""
DOC_KEY = "document:run"
_DESCRIPTIVE = ("task_summary", "remaining_steps", "retry_strategy", "executor_hint", "meta")
_STEP_FIELDS = ("step_id", "parent_id", "key", "kind", "name", "status", "seq", "output", "meta",
                "created_at", "updated_at")  # fmt: skip


class RunNotFoundError(AgentRewindError, LookupError):
    """The run does not exist in the store (or has expired)."""


@dataclasses.dataclass(frozen=True, slots=True)
class ValidationIssue:
    """One problem in a document: the field (`steps[2].status`) and what is wrong."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class DocumentError(AgentRewindError, ValueError):
    """A document is invalid (`issues` lists every problem) or cannot be imported."""

    def __init__(self, message: str, issues: list[ValidationIssue] | None = None) -> None:
        self.issues = list(issues or [])
        if self.issues:
            message += ":\n" + "\n".join(f"  - {issue}" for issue in self.issues)
        super().__init__(message)


@dataclasses.dataclass(slots=True)
class RunDocument:
    """A parsed run document; `to_dict()`/`emit()` give the JSON form back unchanged."""

    run_id: str
    status: str
    steps: list[dict[str, Any]]
    retry_strategy: str = "resume"
    task_summary: str | None = None
    remaining_steps: list[Any] = dataclasses.field(default_factory=list)
    heads: dict[str, str] = dataclasses.field(default_factory=dict)
    partial_output: Any = None
    failure: dict[str, Any] | None = None
    confidence: float | None = None
    executor_hint: str | None = None
    state: Any = None
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)
    created_at: float | None = None
    exported_at: float | None = None
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The document as JSON data (format and version first)."""
        data: dict[str, Any] = {"format": DOCUMENT_FORMAT, "version": DOCUMENT_VERSION}
        data.update(dataclasses.asdict(self))
        return data

    def records(self, run_id: str | None = None) -> list[StepRecord]:
        """The steps as `StepRecord`s, optionally moved to another run id."""
        target = run_id or self.run_id
        return [
            StepRecord(run_id=target, **{k: step[k] for k in _STEP_FIELDS if k in step})
            for step in self.steps
        ]


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


def schema_path() -> Path:
    """Path of the JSON Schema file shipped in the package."""
    return Path(__file__).parent / "schemas" / "run-document.schema.json"


def _load(source: RunDocument | dict[str, Any] | str | bytes | Path) -> Any:
    if isinstance(source, RunDocument):
        return source.to_dict()
    if isinstance(source, Path):
        source = source.read_bytes()
    if isinstance(source, str | bytes):
        try:
            return json.loads(source)
        except ValueError as exc:
            raise DocumentError(
                "not a run document", [ValidationIssue("(document)", f"invalid JSON: {exc}")]
            ) from exc
    return source


def validate(source: RunDocument | dict[str, Any] | str | bytes | Path) -> list[ValidationIssue]:
    """Check a document against the shipped JSON Schema and its internal references.

    Returns:
        Every problem found (empty when the document is valid), each with its field.
    """
    try:
        data = _load(source)
    except DocumentError as exc:
        return exc.issues
    schema = load_schema()
    issues = [ValidationIssue(f, m) for f, m in check(data, schema, schema)]
    if not isinstance(data, dict) or not isinstance(data.get("steps"), list):
        return issues
    ids: set[str] = set()
    keys: set[str] = set()
    steps = [s for s in data["steps"] if isinstance(s, dict)]
    for i, step in enumerate(steps):
        for name, seen in (("step_id", ids), ("key", keys)):
            value = step.get(name)
            if isinstance(value, str):
                if value in seen:
                    issues.append(ValidationIssue(f"steps[{i}].{name}", f"duplicate {value!r}"))
                seen.add(value)
    for i, step in enumerate(steps):
        parent = step.get("parent_id")
        if isinstance(parent, str) and parent not in ids:
            issues.append(
                ValidationIssue(f"steps[{i}].parent_id", f"{parent!r} is not a step here")
            )
    heads = data.get("heads")
    if isinstance(heads, dict):
        for branch, target in heads.items():
            if branch == "HEAD":
                if isinstance(target, str) and target not in heads and target != "main":
                    issues.append(ValidationIssue("heads.HEAD", f"names no branch: {target!r}"))
            elif isinstance(target, str) and target not in ids:
                issues.append(
                    ValidationIssue(f"heads.{branch}", f"{target!r} is not a step of the document")
                )
    failure = data.get("failure")
    failed_id = failure.get("step_id") if isinstance(failure, dict) else None
    if isinstance(failed_id, str) and failed_id not in ids:
        issues.append(ValidationIssue("failure.step_id", "is not a step of the document"))
    return issues


def parse(source: RunDocument | dict[str, Any] | str | bytes | Path) -> RunDocument:
    """Read and validate a document (JSON text, bytes, a path, or already-loaded data).

    Raises:
        DocumentError: The document is invalid; `issues` lists every problem with its field.
    """
    try:
        loaded = _load(source)
    except DocumentError as exc:
        issues = exc.issues
    else:
        issues = validate(loaded)
    if issues:
        raise DocumentError(f"invalid run document ({len(issues)} problem(s))", issues)
    data = dict(loaded)
    data.pop("format")
    data.pop("version")
    return RunDocument(**data)


def emit(document: RunDocument, *, indent: int | None = 2) -> str:
    """Serialize a document to JSON text (`parse(emit(doc)) == doc`)."""
    return json.dumps(document.to_dict(), indent=indent, ensure_ascii=False)


# -- moving runs between stores ------------------------------------------------------------------
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
        steps=[{k: getattr(r, k) for k in _STEP_FIELDS} for r in steps],
        heads=heads,
        metrics=info.metrics.as_dict(),
        created_at=stored.get("created_at", info.created_at),
        exported_at=time.time(),
        state=stored.get("state"),
        confidence=stored.get("confidence"),
        partial_output=stored.get("partial_output"),
        failure=stored.get("failure"),
        **{k: stored[k] for k in _DESCRIPTIVE if k in stored},
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
    return doc


@_closing_store
def import_run(
    store: Store,
    document: RunDocument | dict[str, Any] | str | bytes | Path,
    *,
    run_id: str | None = None,
    replace: bool = False,
) -> str:
    """Write a document's run into `store`: steps in one atomic write, then heads and status.

    Importing the same document twice is a no-op (every step id already present).

    Args:
        store: Target store (or URL).
        document: The document (parsed or not).
        run_id: Import under another run id.
        replace: Delete an existing run of that id first.

    Returns:
        The run id in the store.

    Raises:
        DocumentError: Invalid document, or a different run of that id exists.
    """
    doc = document if isinstance(document, RunDocument) else parse(document)
    target = run_id or doc.run_id
    if store.get_run(target) is not None:
        existing = {r.step_id for r in store.load_steps(target)}
        if not replace and {s["step_id"] for s in doc.steps} <= existing:
            return target
        if not replace:
            raise DocumentError(
                f"run {target!r} already exists in {store.url} with other steps: pass "
                "replace=True (CLI --replace) or another run id"
            )
        store.delete_run(target)
    kept = {k: getattr(doc, k) for k in (*_DESCRIPTIVE, "state", "confidence", "partial_output",
                                          "failure", "created_at")}  # fmt: skip
    record = StepRecord(target, f"document-{target}", DOC_KEY, DOC_KIND, "run-document",
                        "completed", 0, output=kept, created_at=time.time())  # fmt: skip
    store.begin_run(target)
    store.put_steps([record, *doc.records(target)], heads=doc.heads)
    store.end_run(target, doc.status, RunMetrics(**doc.metrics))
    return target


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
def fork_run(store: Store, run_id: str, *, at: str, to: str) -> int:
    """Copy a run's history up to step `at` into a new run `to` whose `main` head is `at`.

    For a timeline the copy is `at` and its ancestors (both parents of merges); for a journal
    run it is every step up to `at` in sequence order.

    Returns:
        How many steps were copied.

    Raises:
        RunNotFoundError: No such run or step.
        DocumentError: `to` exists already.
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
    store.begin_run(to)
    store.put_steps([dataclasses.replace(r, run_id=to) for r in copied])
    store.set_head(to, "main", point.step_id)
    store.end_run(to, "partial", RunMetrics())
    return len(copied)
