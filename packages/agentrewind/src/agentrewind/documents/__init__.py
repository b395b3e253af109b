"""Portable run documents (DESIGN §6): the versioned JSON format, its schema, and moving runs.

`document` defines `RunDocument` and reads, checks and writes the JSON (`parse`, `validate`,
`emit`); `schema` is the JSON Schema checker; `transfer` exports, imports, resumes and forks runs.
"""

from .document import (
    DOCUMENT_FORMAT,
    DOCUMENT_VERSION,
    DocumentError,
    RunDocument,
    RunNotFoundError,
    ValidationIssue,
    emit,
    parse,
    schema_path,
    validate,
)
from .transfer import export_run, fork_run, import_run, resume_from

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
