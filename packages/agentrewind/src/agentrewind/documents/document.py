"""Portable run documents (DESIGN §6): hand a run to another process, machine or agent.

A document is versioned JSON (`format: "agentrewind.run"`, `version: 1`) holding every step of
the run (with ids, parent ids, keys and serialized outputs), its branch heads, status, metrics,
state, and how to continue it (`retry_strategy`, `executor_hint`, `remaining_steps`). The JSON
Schema ships in the package (`agentrewind/documents/schemas/run-document.schema.json`);
`validate` checks against it and returns every problem with its field.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from ..errors import AgentRewindError, RunNotFoundError
from ..records import StepRecord
from ..serde.tags import tree_issues
from ..tree import find_cycle
from .schema import check, load_schema

__all__ = [
    "DOCUMENT_FORMAT",
    "DOCUMENT_VERSION",
    "DocumentError",
    "RunDocument",
    "RunNotFoundError",
    "ValidationIssue",
    "emit",
    "parse",
    "schema_path",
    "validate",
]

DOCUMENT_FORMAT = "agentrewind.run"
DOCUMENT_VERSION = 1
DOC_KIND = "document"
"""Kind of the one record that keeps a document's descriptive fields inside the run."""
DOC_KEY = "document:run"
DESCRIPTIVE_FIELDS = ("task_summary", "remaining_steps", "retry_strategy", "executor_hint", "meta")
STEP_FIELDS = ("step_id", "parent_id", "key", "kind", "name", "status", "seq", "output", "meta",
                "created_at", "updated_at")  # fmt: skip


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
            StepRecord(run_id=target, **{k: step[k] for k in STEP_FIELDS if k in step})
            for step in self.steps
        ]


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
        except RecursionError as exc:
            raise DocumentError(
                "not a run document",
                [ValidationIssue("(document)", "JSON nested deeper than the recursion limit")],
            ) from exc
    return source


def _field(path: str) -> str:
    return path.removeprefix("$").removeprefix(".") or "(document)"


def validate(source: RunDocument | dict[str, Any] | str | bytes | Path) -> list[ValidationIssue]:
    """Check a document against the shipped JSON Schema and its internal references.

    Returns:
        Every problem found (empty when the document is valid), each with its field.
    """
    try:
        data = _load(source)
    except DocumentError as exc:
        return exc.issues
    # Tags first: they bound the depth, so the recursive schema check below cannot overflow.
    tags = [ValidationIssue(_field(f), m) for f, m in tree_issues(data)]
    if any("nested deeper" in i.message for i in tags):
        return tags
    schema = load_schema()
    issues = [ValidationIssue(f, m) for f, m in check(data, schema, schema)] + tags
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
    cycle = find_cycle(_parent_links(steps))
    if cycle is not None:
        issues.append(
            ValidationIssue("steps", f"the steps' parents form a cycle: {' -> '.join(cycle[:8])}")
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


def _parent_links(steps: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Each step's parents: `parent_id`, and a merge's other parents (`meta.parents`)."""
    links: dict[str, list[str]] = {}
    for step in steps:
        step_id, meta = step.get("step_id"), step.get("meta")
        if not isinstance(step_id, str):
            continue
        parents = [step["parent_id"]] if isinstance(step.get("parent_id"), str) else []
        more = meta.get("parents") if isinstance(meta, dict) else None
        if isinstance(more, list):
            parents += [p for p in more if isinstance(p, str)]
        links.setdefault(step_id, []).extend(parents)
    return links


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
