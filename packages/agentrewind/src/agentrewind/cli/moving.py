"""CLI commands that move runs: export, import, fork.

Export handles run-source runs such as LangGraph threads too; import refuses changed content
under an existing id.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from ..documents import DocumentError, RunDocument, emit, export_run, import_run, parse
from ..documents.document import STEP_FIELDS
from ..documents.foreign import install_hint, noun
from ..documents.locating import fork, locate, run_sources, run_steps
from ..documents.transfer import run_matches
from .common import CliError, dumps, open_store

__all__ = ["cmd_export", "cmd_fork", "cmd_import"]


def _plain(value: Any) -> Any:
    """JSON data for a value a run source hands out (framework objects become text)."""
    return json.loads(json.dumps(value, default=str))


def _source_document(store: Any, run_id: str, args: argparse.Namespace) -> RunDocument:
    where, steps = run_steps(store, run_id)
    info, run_id = where.info, where.run_id  # `langgraph:ID` names the thread ID
    for s in steps:
        if s.output is None and hasattr(where.source, "output"):
            s.output = where.source.output(store, run_id, s)
    last = steps[-1] if steps else None
    meta: dict[str, Any] = {"source": where.name}
    if hasattr(where.source, "export_native"):  # the run itself, so `import` gives it back
        meta[where.name] = where.source.export_native(store, run_id)
    return RunDocument(
        run_id=run_id,
        status="completed"
        if info is None or info.status in ("completed", where.name)
        else "partial",
        steps=[_plain({k: getattr(s, k) for k in STEP_FIELDS}) for s in steps],
        heads={"main": last.step_id} if last else {},
        metrics=info.metrics.as_dict() if info else {},
        created_at=info.created_at if info else None,
        exported_at=time.time(),
        state=_plain(last.output) if last else None,
        partial_output=_plain(last.output) if last else None,
        task_summary=args.task_summary,
        remaining_steps=args.remaining or [],
        retry_strategy=args.retry_strategy or "resume",
        executor_hint=args.executor_hint,
        meta=meta,
    )


def cmd_export(args: argparse.Namespace) -> int:
    """`agentrewind export RUN`: the run as a portable JSON document."""
    with open_store(args) as store:
        if locate(store, args.run).source is None:
            doc = export_run(
                store,
                args.run,
                task_summary=args.task_summary,
                retry_strategy=args.retry_strategy,
                executor_hint=args.executor_hint,
                remaining_steps=args.remaining or None,
            )
        else:
            doc = _source_document(store, args.run, args)
    text = emit(doc, indent=2)
    if args.output and args.output != "-":
        Path(args.output).write_text(text + "\n", encoding="utf-8")
        print(f"exported run {args.run} ({len(doc.steps)} step(s), {doc.status}) to {args.output}")
    else:
        print(text)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    """`agentrewind import FILE`: validate a document and write its run into the store."""
    try:
        raw = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read {args.file}: {exc.strerror or exc}") from None
    try:
        doc = parse(raw)
    except DocumentError as exc:
        if args.json:
            print(dumps({"valid": False, "issues": [_issue(i) for i in exc.issues]}))
        print(f"error: {exc}", file=sys.stderr)
        return 1
    target = args.run_id or doc.run_id
    source = doc.meta.get("source")
    if isinstance(source, str) and source != "agentrewind":
        return _import_source_run(args, doc, source, target)
    with open_store(args, write=True) as store:
        same = run_matches(store, target, doc)
        if same is False and not args.replace:
            raise CliError(
                f"run {target!r} already exists in {store.url} with different content: "
                "pass --replace to overwrite it, or --run-id to import it under another id"
            )
        if same and not args.replace:
            outcome = "already present"
        else:
            import_run(store, doc, run_id=target, replace=args.replace, force=args.force)
            outcome = "replaced" if same is not None else "imported"
        url = store.url
    if args.json:
        print(dumps({"valid": True, "run_id": target, "steps": len(doc.steps), "outcome": outcome}))
    elif outcome == "already present":
        print(f"run {target} already present in {url} with the same content (nothing written)")
    else:
        print(f"{outcome} run {target} ({len(doc.steps)} step(s), {doc.status}) into {url}")
    return 0


def _import_source_run(args: argparse.Namespace, doc: RunDocument, name: str, target: str) -> int:
    """Import a run of a run source (a LangGraph thread) as that kind of run, or refuse.

    Never as a journal run: a thread imported as steps would sit beside the thread under the
    same id, and the framework could not resume it.
    """
    source = next((s for s in run_sources() if getattr(s, "name", None) == name), None)
    if source is None:
        hint = install_hint(name)
        raise CliError(f"{args.file} holds a {noun(name)}, which this installation cannot "
                       "import" + (f": run `{hint}`" if hint else ""))  # fmt: skip
    if not hasattr(source, "import_native") or name not in doc.meta:
        raise CliError(f"{args.file} holds a {name} run without the {name} data to restore it "
                       "(exported by an older version?); nothing was imported")  # fmt: skip
    with open_store(args, write=True) as store:
        # Only a thread of that id is in the way: a journal run of the same id is its linked
        # twin (a wrapped graph saved by RewindSaver), reached as `ID` beside `NAME:ID`.
        if source.get_run(store, target) is not None and not args.replace:
            raise CliError(f"a {noun(name)} {target!r} already exists in {store.url}: import "
                           "it under another id with --run-id, or pass --replace")  # fmt: skip
        try:
            count = source.import_native(store, target, doc.meta[name], replace=args.replace)
        except ValueError as exc:
            raise CliError(f"cannot import {args.file}: {exc}") from None
        url = store.url
    if args.json:
        print(dumps({"valid": True, "run_id": target, "steps": count, "outcome": "imported",
                     "source": name}))  # fmt: skip
    else:
        print(f"imported {name} run {target} ({count} checkpoint(s)) into {url}")
    return 0


def _issue(issue: Any) -> dict[str, str]:
    return {"field": issue.field, "message": issue.message}


def cmd_fork(args: argparse.Namespace) -> int:
    """`agentrewind fork RUN --at STEP --to NEW`: copy a prefix of a run into a new run."""
    with open_store(args, write=True) as store:
        done = fork(store, args.run, args.at, args.to)
    point = done.at
    data = {"run_id": args.to, "from": args.run, "at": point.step_id, "seq": point.seq,
            "steps": done.steps, "source": done.source}  # fmt: skip
    if args.json:
        print(dumps(data))
    else:
        print(
            f"forked {args.run} at step {point.seq} ({point.step_id}) into {args.to} "
            f"({done.steps} step(s) copied)"
        )
    return 0
